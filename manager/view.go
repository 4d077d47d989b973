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

// Synced reports whether the informer caches have synced and the state
// holds the cluster's objects.
func (m *Manager) Synced() bool { return m.ready.Load() }
