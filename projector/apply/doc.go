// Package apply is the only code that writes Kueue objects and
// AcceleratorQuota statuses; the other writes are the shell's (root and its
// finalizer, Kubernetes Events) and the webhook's (its certificate and its
// admission record). It compares the projector's desired objects with the
// informer caches and sends server-side applies for what differs, through
// a bounded pool of workers; it sweeps managed objects that no node wants
// any more; and it writes node status through the status subresource. For
// each node it reports how it left the node's objects (an events.Outcome:
// applied, a conflict, a failed write); the shell sends it through the
// event stream when it differs from the one the state holds, and projects
// the node's status from the state. It never updates or deletes an object
// without the ome.io/quota-managed-by label, and never touches the objects
// of a held (not Ready) node.
//
// A write refused for good backs off per object and per desired content
// (a changed object is sent at once), on the applier's clock, and its
// error and delay go into Materialized's message. client-go's
// flowcontrol.Backoff keys by string alone, restarts after twice its
// longest delay, and keeps no error, so the map it would replace stays,
// with the ten lines that double the delay.
package apply
