package state

import (
	"time"

	"ome.io/quota-manager/events"
)

// A condition's lastTransitionTime is read from the log like everything
// else the leader writes, so that a replay prints the stamps the leader
// wrote. The state dates each flip of a condition's status with the time
// of the event that caused it (Since), and keeps the stamps the stored
// status shows (an AcceleratorQuota event carries them): a condition whose
// status stands, as the object shows it, keeps its stored stamp, which is
// how a new leader, or the same one after a restart, leaves the stamps of
// a quiet tree alone. The projector picks the stamp (projector.Node).

// Since is when each of a node's conditions last took its status, in whole
// seconds: Ready (and Degraded, its opposite) and Materialized.
type Since struct {
	Ready, Materialized time.Time
}

// ready is the status of the node's Ready condition.
func (m *member) ready() bool { return m.phase == PhaseReady }

// materialized is the status of its Materialized condition: Ready, with
// every Kueue object in place.
func (m *member) materialized() bool {
	return m.ready() && m.outcome.Kind == events.OutcomeApplied
}

// restamp dates with the event being applied each condition of m whose
// status differs from the one it had (wasReady, wasMaterialized).
func (s *State) restamp(m *member, wasReady, wasMaterialized bool) {
	if m.ready() != wasReady {
		m.since.Ready = s.now
	}
	if m.materialized() != wasMaterialized {
		m.since.Materialized = s.now
	}
}

// Stamps is when node's conditions took their status, and the stamps its
// stored status shows; zero values for a node the state does not hold.
func (s *State) Stamps(node string) (Since, []events.Stamp) {
	if m := s.members[node]; m != nil {
		return m.since, m.stored
	}
	return Since{}, nil
}
