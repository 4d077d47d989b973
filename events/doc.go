// Package events is the one ordered stream of inputs that the quota manager's
// state is built from.
//
// Every input becomes an [Event]: a change to an AcceleratorQuota, a Node, a
// Kueue ResourceFlavor, a Kueue ClusterQueue's usage, a DRA DeviceClass or
// ResourceSlice, a timer [Tick], a [Config] (the manager's flags and DRA
// mappings), a failed measurement, a start marker, the [Synced] marker
// that every informer's initial list is in the stream before it, the
// admission webhook's [Verdict] on a write of the tree (recorded for the
// audit trail; the state ignores it), the leader's applier reporting how it
// left a node's Kueue objects (an [Outcome], which the node's Materialized
// condition reports), or a replica taking or losing the lead
// ([Leadership]). An event is an envelope (sequence number, receipt time,
// kind, operation, object key, schema version on the wire) around a compact
// payload that holds only what the state needs of the object.
//
// Events have a stable, versioned encoding (JSON lines, one event per line,
// with the schema version in field "v"): [Encoder] writes it, [Decoder] reads
// it back, upgrading older versions (see [SchemaVersion]), and refuses with
// a [VersionError] a line written by a newer version. An event log written
// today can be replayed tomorrow, bit for bit. [AppendMarshal] writes the
// same bytes as encoding/json would, by hand for the busiest kinds, into a
// buffer the caller reuses.
//
// [Stream] is the queue between the publishers (the informer handlers, the
// timers, the webhook's verdicts and the leader's own doings) and the
// reducer (exactly one consumer). It assigns gap-free sequence numbers in
// the order events are accepted, and it is bounded: Publish blocks while
// the stream is full, so a slow consumer slows the publishers down instead
// of growing memory without end.
//
// The package is pure: it imports no client-go client or informer and never
// reads the clock. Times are supplied by the caller; the informer adapters in
// package sources take the clock as a function.
package events
