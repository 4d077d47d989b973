package plane

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"

	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/state"
)

// testHost is the manager as the plane sees it, without a cluster: a
// stream the test consumes (or drains), a state it applies events to,
// leadership it sets, and the outcomes and queued nodes the plane reports.
type testHost struct {
	opts   *manager.Options
	stream *events.Stream
	kube   kubernetes.Interface
	quotas aqtyped.AcceleratorQuotaInterface
	leads  atomic.Bool

	mu       sync.Mutex
	st       *state.State
	outcomes map[string]events.Outcome
	queued   []string
}

func newTestHost(o *manager.Options) *testHost {
	return &testHost{opts: o, stream: events.NewStream(256, 1), st: state.New(), outcomes: map[string]events.Outcome{}}
}

func (h *testHost) Options() *manager.Options { return h.opts }

func (h *testHost) Publish(ctx context.Context, ev events.Event) (uint64, error) {
	return h.stream.Publish(ctx, ev)
}

func (h *testHost) View(f func(*state.State)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h.st)
}

func (h *testHost) WaitRecorded(uint64) {}

func (h *testHost) Leads() bool { return h.leads.Load() }

// ReportOutcome records the outcome; like the manager, it sends nothing
// when the outcome is the one already held.
func (h *testHost) ReportOutcome(_ context.Context, node string, o events.Outcome) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outcomes[node] == o {
		return 0, nil
	}
	h.outcomes[node] = o
	return h.st.LastSeq(), nil
}

func (h *testHost) Queue(node string) {
	h.mu.Lock()
	h.queued = append(h.queued, node)
	h.mu.Unlock()
}

func (h *testHost) Kube() kubernetes.Interface { return h.kube }

func (h *testHost) Quotas() aqtyped.AcceleratorQuotaInterface { return h.quotas }
