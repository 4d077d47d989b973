package manager

import (
	"ome.io/quota-manager/projector"
)

// settings reads what projecting one node needs besides the node; m.mu is
// held.
func (m *Manager) settings() projector.Input {
	c := m.st.Config()
	return projector.Settings(m.st, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources))
}
