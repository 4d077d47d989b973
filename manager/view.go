package manager

import (
	"errors"

	"ome.io/quota-manager/state"
)

// View runs f with the current state under the reducer's lock, so that f
// sees a consistent tree. f must be quick and must not keep the state.
// The admission webhook reads the rule book's inputs through it.
func (m *Manager) View(f func(*state.State)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.st)
}

// Observe runs f like View and returns a channel that is closed once the
// next event has been applied: the webhook waits on it for a write it
// admitted to reach the state.
func (m *Manager) Observe(f func(*state.State)) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.st)
	return m.applied
}

// Synced reports whether the state holds the cluster's objects: every
// informer's initial list reached the stream before the Synced marker, and
// the reducer applied it. No measurement, and no admission decision that
// reads the state, happens before.
func (m *Manager) Synced() bool { return m.stateSynced.Load() && m.ready.Load() }

// NotReady is nil once the replica runs with the cluster's objects in its
// state; until then it says what the replica waits for and, where the
// operator can help, what to do. /readyz prints it, and the webhook's
// refusal carries it.
func (m *Manager) NotReady() error {
	if m.Synced() {
		return nil
	}
	if p := m.startup.Load(); p != nil {
		return errors.New(*p)
	}
	return errors.New("starting")
}

func (m *Manager) setStartup(cause string) { m.startup.Store(&cause) }
