// Package manager is the shell of ome-quota-manager: it wires the informers
// to the event stream, runs the one reducer goroutine over the pure state,
// projects the state and, only while it holds the leader lease, hands the
// projection to the applier. What the leader itself does goes through the
// same stream: taking or losing the lease (a Leadership event) and, when it
// changes, how the applier left a node's Kueue objects (an Outcome event,
// applied before the node's status is projected), so that a replay of the
// log computes the statuses it wrote. The Node informer's cache holds each
// Node's compact record (events/sources.CachedNode), the one its events and
// the state share. It also creates root, serves metrics and the health
// probes, and shuts down cleanly on SIGTERM, releasing the lease.
package manager
