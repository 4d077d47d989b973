package manager

import (
	"ome.io/quota-manager/projector"
)

// input reads the state into the projection's input; m.mu is held.
func (m *Manager) input() projector.Input {
	c := m.st.Config()
	return projector.FromState(m.st, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources), m.outcomes)
}
