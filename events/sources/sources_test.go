package sources

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

var t0 = time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC)

// recorder is a Publisher that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	events []events.Event
	err    error
}

func (r *recorder) Publish(_ context.Context, ev events.Event) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.events = append(r.events, ev)
	ev.Seq = uint64(len(r.events))
	return ev.Seq, nil
}

func (r *recorder) summary() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		out = append(out, ev.String())
	}
	return out
}

func newHandlers() (*Handlers, *recorder, *[]error) {
	rec := &recorder{}
	var errs []error
	return New(context.Background(), rec, func() time.Time { return t0 }, func(err error) { errs = append(errs, err) }), rec, &errs
}

func gpuNode(name string, gpus string, ready bool) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), corev1.ResourceCPU: resource.MustParse("64")},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), corev1.ResourceCPU: resource.MustParse("63")},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(t0)},
			},
		},
	}
}

func TestNodeHandler(t *testing.T) {
	h, rec, errs := newHandlers()
	nodes := h.Nodes()
	n1 := gpuNode("n1", "8", true)
	nodes.OnAdd(n1, true)

	// A heartbeat and a new resourceVersion change nothing the state reads.
	beat := n1.DeepCopy()
	beat.ResourceVersion = "2"
	beat.Status.Conditions[1].LastHeartbeatTime = metav1.NewTime(t0.Add(time.Minute))
	nodes.OnUpdate(n1, beat)
	// Nor does a quantity written differently.
	same := beat.DeepCopy()
	same.Status.Capacity["nvidia.com/gpu"] = resource.MustParse("8000m")
	nodes.OnUpdate(beat, same)

	cordoned := same.DeepCopy()
	cordoned.Spec.Unschedulable = true
	nodes.OnUpdate(same, cordoned)
	notReady := cordoned.DeepCopy()
	notReady.Status.Conditions[1].Status = corev1.ConditionUnknown
	nodes.OnUpdate(cordoned, notReady)
	relabeled := notReady.DeepCopy()
	relabeled.Labels["pool"] = "a"
	nodes.OnUpdate(notReady, relabeled)

	nodes.OnDelete(relabeled)
	nodes.OnDelete(cache.DeletedFinalStateUnknown{Key: "n2", Obj: gpuNode("n2", "4", true)})
	nodes.OnDelete(cache.DeletedFinalStateUnknown{Key: "n3"})

	want := []string{
		"#0 Node upsert n1", "#0 Node upsert n1", "#0 Node upsert n1", "#0 Node upsert n1",
		"#0 Node delete n1", "#0 Node delete n2", "#0 Node delete n3",
	}
	if diff := cmp.Diff(want, rec.summary()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if len(*errs) != 0 {
		t.Errorf("unexpected errors: %v", *errs)
	}
	for i, ev := range rec.events {
		if !ev.Time.Equal(t0) {
			t.Errorf("event %d stamped %v, want the injected clock's %v", i, ev.Time, t0)
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	if got := rec.events[3].Node; got.Ready || !got.Unschedulable || got.Labels["pool"] != "a" {
		t.Errorf("last update: %+v, want not ready, cordoned, relabeled", got)
	}
}

func TestNodeOf(t *testing.T) {
	n := gpuNode("n1", "8", true)
	got := NodeOf(n)
	want := &events.Node{
		Name:        "n1",
		Labels:      map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
		Capacity:    map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8"), "cpu": resource.MustParse("64")},
		Allocatable: map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8"), "cpu": resource.MustParse("63")},
		Ready:       true,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The compact form is a copy: the informer's object must stay untouched.
	got.Labels["x"] = "y"
	if _, ok := n.Labels["x"]; ok {
		t.Error("NodeOf shares the labels map with the informer's object")
	}
	// No Ready condition at all counts as not Ready.
	n.Status.Conditions = nil
	if NodeOf(n).Ready {
		t.Error("a node without a Ready condition counts as Ready")
	}
}

func TestQuotaHandler(t *testing.T) {
	h, rec, errs := newHandlers()
	quotas := h.Quotas()
	aq := &v1beta1.AcceleratorQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "team-alpha", Generation: 1},
		Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"},
			Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse("16")}}},
	}
	quotas.OnAdd(aq, false)
	// Our own condition writes come back as updates, and their stamps
	// travel: the state keeps a stamp the stored object already carries.
	withConditions := aq.DeepCopy()
	since := metav1.NewTime(time.Date(2026, 11, 30, 9, 9, 3, 0, time.UTC))
	withConditions.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: since}}
	quotas.OnUpdate(aq, withConditions)
	// The same object again (a resync) is no event.
	quotas.OnUpdate(withConditions, withConditions.DeepCopy())
	raised := withConditions.DeepCopy()
	raised.Generation = 2
	raised.Spec.Budgets[0].Nominal = resource.MustParse("20")
	quotas.OnUpdate(withConditions, raised)
	quotas.OnDelete(cache.DeletedFinalStateUnknown{Key: "team-alpha", Obj: raised})

	if diff := cmp.Diff([]string{"#0 AcceleratorQuota upsert team-alpha", "#0 AcceleratorQuota upsert team-alpha", "#0 AcceleratorQuota upsert team-alpha", "#0 AcceleratorQuota delete team-alpha"}, rec.summary()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]events.Stamp{{Type: v1beta1.ConditionReady, Status: "True", Since: since.UTC()}}, rec.events[1].Quota.Conditions); diff != "" {
		t.Errorf("the status write's stamps (-want +got):\n%s", diff)
	}
	if got := rec.events[2].Quota; got.Generation != 2 || got.Spec.Budgets[0].Nominal.String() != "20" {
		t.Errorf("update carries %+v", got)
	}
	if len(*errs) != 0 {
		t.Errorf("unexpected errors: %v", *errs)
	}
	// The capacity in root's status travels, so marks can be read back.
	root := &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{Name: v1beta1.RootName}, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort},
		Status: v1beta1.AcceleratorQuotaStatus{Capacity: []v1beta1.CapacityStatus{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", HighWaterMark: resource.MustParse("32")}}}}
	if got := QuotaOf(root).Capacity; len(got) != 1 || got[0].HighWaterMark.String() != "32" {
		t.Errorf("root's capacity not carried: %+v", got)
	}
	// A deletion held by a finalizer travels: admission refuses to put a
	// node under it.
	held := aq.DeepCopy()
	held.DeletionTimestamp = &since
	if !QuotaOf(held).Deleting || QuotaOf(aq).Deleting {
		t.Errorf("deletionTimestamp not carried as deleting")
	}
	// Who wrote it and when travels as the record of its managedFields,
	// whether the cache kept the fields they own or not.
	written := aq.DeepCopy()
	written.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &since}}
	if got, want := QuotaOf(written).Record, events.RecordOf(written.ManagedFields); got != want || got == "" {
		t.Errorf("record %q, want %q", got, want)
	}
	if got := QuotaOf(aq).Record; got != "" && len(aq.ManagedFields) == 0 {
		t.Errorf("no managedFields, but record %q", got)
	}
}

func TestFlavorAndQueueHandlers(t *testing.T) {
	h, rec, errs := newHandlers()
	rf := &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "a100"}, Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}
	h.Flavors().OnAdd(rf, true)
	h.Flavors().OnUpdate(rf, rf.DeepCopy())
	h.Flavors().OnDelete(rf)

	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "team-beta", Labels: map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}},
		Status: kueue.ClusterQueueStatus{
			FlavorsUsage: []kueue.FlavorUsage{{Name: "a100", Resources: []kueue.ResourceUsage{
				{Name: "nvidia.com/gpu", Total: resource.MustParse("10"), Borrowed: resource.MustParse("2")},
				{Name: "cpu", Total: resource.MustParse("4")},
			}}},
			FlavorsReservation: []kueue.FlavorUsage{{Name: "a100", Resources: []kueue.ResourceUsage{{Name: "nvidia.com/gpu", Total: resource.MustParse("12")}}}},
		},
	}
	h.ClusterQueues().OnAdd(cq, false)
	pending := cq.DeepCopy()
	pending.Status.PendingWorkloads = 3
	h.ClusterQueues().OnUpdate(cq, pending)

	if diff := cmp.Diff([]string{"#0 ResourceFlavor upsert a100", "#0 ResourceFlavor delete a100", "#0 ClusterQueue upsert team-beta"}, rec.summary()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	want := &events.Queue{Name: "team-beta", Managed: true, Usage: []events.Usage{
		{Resource: "cpu", Flavor: "a100", Admitted: resource.MustParse("4")},
		{Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse("10"), Reserved: resource.MustParse("12"), Borrowed: resource.MustParse("2")},
	}}
	if diff := cmp.Diff(want, rec.events[2].Queue, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	if QueueOf(&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}}).Managed {
		t.Error("a ClusterQueue without our label counts as managed")
	}
	if len(*errs) != 0 {
		t.Errorf("unexpected errors: %v", *errs)
	}
}

func TestHandlerErrors(t *testing.T) {
	h, rec, errs := newHandlers()
	h.Nodes().OnAdd(&corev1.Pod{}, false)
	h.Nodes().OnUpdate(nil, (*corev1.Node)(nil))
	h.Nodes().OnDelete("what")
	if len(rec.events) != 0 {
		t.Errorf("published %v for objects of the wrong type", rec.summary())
	}
	if len(*errs) != 3 || !strings.Contains((*errs)[0].Error(), "wired to the wrong handler") {
		t.Errorf("errors: %v", *errs)
	}
	*errs = nil
	rec.err = events.ErrClosed
	h.Nodes().OnAdd(gpuNode("n1", "8", true), false)
	if len(*errs) != 1 || !errors.Is((*errs)[0], events.ErrClosed) || !strings.Contains((*errs)[0].Error(), `Node event for "n1"`) {
		t.Errorf("errors: %v", *errs)
	}
}

func TestHandlersThroughStream(t *testing.T) {
	s := events.NewStream(16, 1)
	h := New(context.Background(), s, func() time.Time { return t0 }, func(err error) { t.Error(err) })
	h.Nodes().OnAdd(gpuNode("n1", "8", true), true)
	h.Nodes().OnDelete(gpuNode("n1", "8", true))
	s.Close()
	var got []string
	if err := s.Consume(context.Background(), func(ev events.Event) error { got = append(got, ev.String()); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"#1 Node upsert n1", "#2 Node delete n1"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRunTicker(t *testing.T) {
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- RunTicker(ctx, rec, time.Millisecond, func() time.Time { return t0 }) }()
	for len(rec.summary()) < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	for _, ev := range rec.summary()[:3] {
		if ev != "#0 Tick" {
			t.Errorf("published %s, want ticks", ev)
		}
	}
	rec.err = events.ErrClosed
	if err := RunTicker(context.Background(), rec, time.Hour, time.Now); !errors.Is(err, events.ErrClosed) {
		t.Errorf("got %v, want ErrClosed", err)
	}
}

func TestPublishConfig(t *testing.T) {
	rec := &recorder{}
	cfg := events.DefaultConfig()
	cfg.MeasuredResources = []string{"nvidia.com/gpu", "amd.com/gpu"}
	if err := PublishConfig(context.Background(), rec, cfg, t0); err != nil {
		t.Fatal(err)
	}
	if got := rec.events[0].Config.MeasuredResources; !cmp.Equal(got, []string{"amd.com/gpu", "nvidia.com/gpu"}) {
		t.Errorf("measured resources %v, want them sorted", got)
	}
	cfg.HysteresisPercent = 200
	if err := PublishConfig(context.Background(), rec, cfg, t0); err == nil || !strings.Contains(err.Error(), "--capacity-hysteresis-percent") {
		t.Errorf("got %v, want a refusal naming the flag", err)
	}
}

// registration is a handler registration whose initial list the test
// declares handled.
type registration struct{ synced atomic.Bool }

func (r *registration) HasSynced() bool { return r.synced.Load() }

// PublishSynced waits for every registration before the marker.
func TestPublishSynced(t *testing.T) {
	rec := &recorder{}
	a, b := &registration{}, &registration{}
	a.synced.Store(true)
	done := make(chan error)
	go func() { done <- PublishSynced(context.Background(), rec, func() time.Time { return t0 }, a, b) }()
	select {
	case err := <-done:
		t.Fatalf("published before every initial list was handled: %v, %v", err, rec.summary())
	case <-time.After(300 * time.Millisecond):
	}
	if got := rec.summary(); len(got) != 0 {
		t.Fatalf("published %v before the handlers synced", got)
	}
	b.synced.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"#0 Synced"}, rec.summary()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := PublishSynced(ctx, rec, time.Now, &registration{}); err == nil {
		t.Error("returned nil though its context ended before the handlers synced")
	}
}

// TestListEndMarker: the marker a list of AcceleratorQuotas ends with is
// published as the end of the list, at the list's version, and never as
// an AcceleratorQuota.
func TestListEndMarker(t *testing.T) {
	h, rec, errs := newHandlers()
	quotas := h.Quotas()
	end := &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{Name: ListEnd, ResourceVersion: "30"}}
	quotas.OnAdd(end, true)
	again := end.DeepCopy()
	again.ResourceVersion = "41"
	quotas.OnUpdate(end, again)
	quotas.OnDelete(cache.DeletedFinalStateUnknown{Key: ListEnd, Obj: again})
	if diff := cmp.Diff([]string{"#0 QuotaListed", "#0 QuotaListed"}, rec.summary()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if rec.events[0].Version != 30 || rec.events[1].Version != 41 {
		t.Errorf("versions %d and %d, want 30 and 41", rec.events[0].Version, rec.events[1].Version)
	}
	if len(*errs) != 0 {
		t.Errorf("unexpected errors: %v", *errs)
	}
}
