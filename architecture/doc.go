// Package architecture holds no code: its test checks the import graph and
// the clock use of the whole module with the Go toolchain's own package
// loader, so that the layering docs/architecture.md describes holds. The
// pure core (state, events, the projector's desired-object computation)
// reaches no Kubernetes client, no network, no randomness and no clock;
// the informer adapters reach client-go's cache only.
package architecture
