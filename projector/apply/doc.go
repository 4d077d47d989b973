// Package apply is the only code that writes to the API server. It compares
// the projector's desired objects with the informer caches and sends
// server-side applies for what differs, through a bounded pool of workers;
// it sweeps managed objects that no node wants any more; and it writes node
// status through the status subresource. It never updates or deletes an
// object without the ome.io/quota-managed-by label, and never touches the
// objects of a held (not Ready) node.
package apply
