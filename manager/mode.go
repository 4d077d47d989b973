package manager

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// Mode is what one way of running the manager adds to the shell every
// replica shares (the AcceleratorQuota informer, the stream and its one
// consumer, the event log, leader election, the per-node workers that
// write statuses and Kueue objects, metrics and probes). The shell calls
// it at a handful of points and knows nothing else of it: the workload
// mode (workload.go) measures the cluster it runs on and watches the
// Kueue objects it writes; a management plane (package manager/plane)
// reads its inventory and its members and writes copies to them. A mode
// reaches the shell through a Host.
type Mode interface {
	// APIs are what the mode watches on the manager's own cluster besides
	// the AcceleratorQuotas: the manager waits until the API server serves
	// them before it calls Start, and says meanwhile what is missing.
	APIs() []API
	// Start registers the mode's inputs (its handlers on the manager's
	// informers, or informers of its own) and starts what runs beside
	// them, before the manager's AcceleratorQuota informer starts. The
	// manager waits until every registration returned has handled its
	// initial list before it publishes the Synced marker. An error stops
	// the replica.
	Start(ctx context.Context, h *sources.Handlers) ([]cache.ResourceEventHandlerRegistration, error)
	// Applied follows each event the state applied, on the consumer's
	// goroutine, after the shell queued what the event changed: the state
	// a Host.View sees here is the one right after ev. It must not block
	// on the stream.
	Applied(ctx context.Context, ev events.Event)
	// BecameLeader follows this replica's taking the lead, once the state
	// holds its Leadership event.
	BecameLeader(ctx context.Context)
	// NodeApplied takes the applier's outcome on a node after a pass of
	// the shell's workers, and returns the sequence number of the event
	// that reported it to the state, 0 when none was sent (the node's
	// status is written once the state applied it).
	NodeApplied(ctx context.Context, node string, o events.Outcome) (uint64, error)
	// Snapshot adds the mode's figures to a metrics scrape: s holds what
	// every mode reports, read from st under the reducer's lock.
	Snapshot(st *state.State, s *metrics.Snapshot)
}

// API is a group version whose resources the manager watches, and what to
// do when they are missing.
type API struct {
	GroupVersion string
	Resources    []string
	// What names them for an operator, Fix says how to get them.
	What, Fix string
}

// Host is what a Mode reaches of the manager that runs it.
type Host interface {
	// Options are the manager's options, checked.
	Options() *Options
	// Publish puts an event on the stream and returns its sequence
	// number.
	Publish(ctx context.Context, ev events.Event) (uint64, error)
	// View runs f on the state under the reducer's lock (Manager.View).
	View(f func(*state.State))
	// WaitRecorded returns once the event log holds every event up to
	// seq, so that nothing derived from them leaves the replica before
	// the log has them; at once when nothing is recorded.
	WaitRecorded(seq uint64)
	// Leads reports whether this replica holds the lead: only the leader
	// writes.
	Leads() bool
	// ReportOutcome sends how a node's enforcement objects stand as an
	// Outcome event when it differs from the state's, waits until the
	// state applied it, and returns its sequence number (0: nothing sent).
	ReportOutcome(ctx context.Context, node string, o events.Outcome) (uint64, error)
	// Queue asks the shell's urgent workers for a pass on a node: its
	// status is written from the state as it then stands.
	Queue(node string)
	// Kube and Quotas are clients of the manager's own cluster.
	Kube() kubernetes.Interface
	Quotas() aqtyped.AcceleratorQuotaInterface
}

// host is the Host a manager gives its mode.
type host struct{ m *Manager }

func (h host) Options() *Options { return h.m.opts }

func (h host) Publish(ctx context.Context, ev events.Event) (uint64, error) {
	return h.m.stream.Publish(ctx, ev)
}

func (h host) View(f func(*state.State)) { h.m.View(f) }

func (h host) WaitRecorded(seq uint64) {
	if h.m.rec != nil {
		h.m.rec.Wait(seq)
	}
}

func (h host) Leads() bool { return h.m.leader.Load() }

func (h host) ReportOutcome(ctx context.Context, node string, o events.Outcome) (uint64, error) {
	return h.m.reportOutcome(ctx, node, o)
}

func (h host) Queue(node string) { h.m.shell.urgent.Add(node) }

func (h host) Kube() kubernetes.Interface { return h.m.kube }

func (h host) Quotas() aqtyped.AcceleratorQuotaInterface { return h.m.aqs }
