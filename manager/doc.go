// Package manager is the shell of ome-quota-manager: it wires the informers
// to the event stream, runs the one reducer goroutine over the pure state,
// projects the state and, only while it holds the leader lease, hands the
// projection to the applier. It also creates root, serves metrics and the
// health probes, and shuts down cleanly on SIGTERM, releasing the lease.
package manager
