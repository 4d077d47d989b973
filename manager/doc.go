// Package manager is the shell of ome-quota-manager: it wires the informers
// to the event stream, runs the one reducer goroutine over the pure state,
// projects the state and, only while it holds the leader lease, hands the
// projection to the applier. What the leader itself does goes through the
// same stream: taking or losing the lease (a Leadership event) and, when it
// changes, how the applier left a node's Kueue objects (an Outcome event,
// applied before the node's status is projected), so that a replay of the
// log computes the statuses it wrote. It also creates root, serves metrics
// and the health probes, and shuts down cleanly on SIGTERM, releasing the
// lease.
//
// What differs between the two ways of running sits behind one seam, Mode
// (mode.go), which the shell calls at a few points and reaches back through
// a Host. The workload mode (workload.go) measures the cluster it runs on
// (Nodes, whose informer cache holds each Node's compact record,
// events/sources.CachedNode; DRA devices), reads its ResourceFlavors and
// ClusterQueues and watches the Kueue objects it writes for drift. A
// management plane's mode is package manager/plane, which imports this
// one; nothing here switches on the plane.
package manager
