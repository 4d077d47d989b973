package manager

import "ome.io/quota-manager/state"

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

// Synced reports whether the informer caches have synced and the state
// holds the cluster's objects.
func (m *Manager) Synced() bool { return m.ready.Load() }
