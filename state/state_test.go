package state

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

var t0 = time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC)

// applyAll numbers evs from the state's last sequence number on and applies
// them, returning every transition.
func applyAll(s *State, evs ...events.Event) []Transition {
	var out []Transition
	for _, ev := range evs {
		ev.Seq = s.LastSeq() + 1
		out = append(out, s.Apply(ev)...)
	}
	return out
}

func quota(name string, sp *v1beta1.AcceleratorQuotaSpec) events.Event {
	return events.QuotaUpserted(t0, &events.Quota{Name: name, Generation: 1, Spec: *sp})
}

func guideState(t *testing.T) *State {
	t.Helper()
	s := New()
	gpu := map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")}
	evs := []events.Event{events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}})}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		evs = append(evs, events.NodeUpserted(t0, &events.Node{Name: n, Labels: map[string]string{"gpu": "a100"}, Capacity: gpu, Allocatable: gpu, Ready: true}))
	}
	evs = append(evs, events.Synced(t0))
	tree := guideTree()
	for _, name := range []string{"root", "ml-research", "team-alpha", "team-beta"} {
		evs = append(evs, quota(name, tree[name]))
	}
	applyAll(s, evs...)
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNodeView(t *testing.T) {
	s := guideState(t)
	got, ok := s.Node("ml-research")
	if !ok {
		t.Fatal("ml-research not found")
	}
	want := NodeView{
		Name: "ml-research", Generation: 1, Spec: got.Spec, Parent: "root",
		Children: []string{"team-alpha", "team-beta"}, Depth: 1,
		Status: Status{Phase: PhaseReady, Reason: ReasonAdmitted, Message: MessageAdmitted},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.Spec.Budgets[0].Nominal.String() != "24" {
		t.Errorf("spec not carried: %+v", got.Spec)
	}
	if names := len(s.Nodes()); names != 4 {
		t.Errorf("%d nodes, want 4", names)
	}
	if _, ok := s.Node("nope"); ok {
		t.Error("found a node that does not exist")
	}
	if _, ok := s.NodeStatus("nope"); ok {
		t.Error("found a status for a node that does not exist")
	}
	st, _ := s.NodeStatus("team-beta")
	if !st.Ready() || st.DegradedMessage() != MessageNoViolation {
		t.Errorf("team-beta: %+v", st)
	}
}

func TestFrozenStatus(t *testing.T) {
	s := guideState(t)
	tr := applyAll(s, quota("team-alpha", spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", "20"))))
	want := []Transition{
		{Seq: 11, Node: "ml-research", From: PhaseReady, To: PhaseContainmentViolated, Reason: ReasonContainmentViolated,
			Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"},
		{Seq: 11, Node: "team-alpha", From: PhaseReady, To: PhaseFrozen, Reason: ReasonFrozen, Message: frozenMessage("ml-research", ReasonContainmentViolated)},
		{Seq: 11, Node: "team-beta", From: PhaseReady, To: PhaseFrozen, Reason: ReasonFrozen, Message: frozenMessage("ml-research", ReasonContainmentViolated)},
	}
	if diff := cmp.Diff(want, tr); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	n, _ := s.Node("team-beta")
	if n.FrozenBy != "ml-research" || n.Reason != ReasonFrozen || n.DegradedMessage() != n.Message {
		t.Errorf("team-beta: %+v", n)
	}
}

func TestIgnoredEvents(t *testing.T) {
	s := guideState(t)
	before := s.Dump()
	for _, ev := range []events.Event{
		{Seq: 11, Kind: events.KindNode, Op: events.OpUpsert, Key: "n1"},
		{Seq: 12, Kind: events.KindDeviceClass, Time: t0},
		{Seq: 13, Kind: events.KindConfig, Config: &events.Config{HysteresisPercent: 500}},
	} {
		if tr := s.Apply(ev); tr != nil {
			t.Errorf("%s caused %v", ev, tr)
		}
	}
	if s.LastSeq() != 13 {
		t.Errorf("last seq %d, want 13", s.LastSeq())
	}
	// Only the sequence number on the first line moves.
	rest := func(d string) string { return d[strings.Index(d, "\n"):] }
	if a, b := rest(before), rest(s.Dump()); a != b {
		t.Errorf("ignored events changed the state:\n%s", lineDiff(a, b))
	}
}

func TestSpecChangeOutsideTheRules(t *testing.T) {
	s := guideState(t)
	sp := spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", "16"))
	sp.Budgets[0].PerCluster = []v1beta1.ClusterShare{{Cluster: "west", Nominal: resource.MustParse("4")}}
	ev := quota("team-alpha", sp)
	ev.Quota.Generation = 7
	if tr := applyAll(s, ev); tr != nil {
		t.Errorf("a change no rule reads caused %v", tr)
	}
	n, _ := s.Node("team-alpha")
	if n.Generation != 7 || len(n.Spec.Budgets[0].PerCluster) != 1 {
		t.Errorf("the new spec is not kept: %+v", n)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := guideState(t)
	c := s.Clone()
	before := s.Dump()
	applyAll(c,
		quota("team-alpha", spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", "20"))),
		events.Deleted(t0, events.KindNode, "n1"),
		events.FlavorUpserted(t0, &events.Flavor{Name: "h100"}),
		events.ConfigChanged(t0, events.Config{MaxTreeDepth: 1, MeasuredResources: []string{"amd.com/gpu"}}),
	)
	if after := s.Dump(); after != before {
		t.Errorf("applying to a clone changed the original:\n%s", lineDiff(before, after))
	}
	if err := checkInvariants(c); err != nil {
		t.Error(err)
	}
	st, _ := c.NodeStatus("team-alpha")
	if st.Phase != PhaseDepthExceeded {
		t.Errorf("the clone's team-alpha is %s, want DepthExceeded", st.Phase)
	}
}

func TestConfigIsACopy(t *testing.T) {
	s := New()
	c := s.Config()
	c.MeasuredResources[0] = "changed"
	if s.Config().MeasuredResources[0] != "google.com/tpu" {
		t.Error("Config shares its slice with the state")
	}
	if diff := cmp.Diff(events.DefaultConfig(), s.Config()); diff != "" {
		t.Errorf("default config (-want +got):\n%s", diff)
	}
}

func TestCapacityStatusAndStamps(t *testing.T) {
	s := guideState(t)
	late := t0.Add(90*time.Second + 700*time.Millisecond)
	applyAll(s, events.Tick(late))
	want := []v1beta1.CapacityStatus{
		{ResourceName: "google.com/tpu", ResourceFlavor: "a100", Allocatable: resource.MustParse("0"), HighWaterMark: resource.MustParse("0"),
			ObservedAt: metav1.NewTime(t0.Add(90 * time.Second))},
		{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Allocatable: resource.MustParse("32"), HighWaterMark: resource.MustParse("32"),
			ObservedAt: metav1.NewTime(t0.Add(90 * time.Second))},
	}
	if diff := cmp.Diff(want, s.CapacityStatus(), cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !s.CapacityNeedsWrite() {
		t.Error("root's status was never written, yet needs no write")
	}
	root, _ := s.Node(v1beta1.RootName)
	applyAll(s, events.QuotaUpserted(late, &events.Quota{Name: v1beta1.RootName, Spec: *root.Spec, Capacity: s.CapacityStatus()}))
	if s.CapacityNeedsWrite() {
		t.Error("root's status was just written, yet needs a write")
	}
	applyAll(s, events.MeasureFailed(late.Add(time.Hour), "nodes is forbidden"))
	if at, why := s.LastMeasureFailure(); !at.Equal(late.Add(time.Hour).Truncate(time.Second)) || why != "nodes is forbidden" {
		t.Errorf("last failure %v %q", at, why)
	}
	if s.CapacityNeedsWrite() {
		t.Error("a failed measurement asks for a write")
	}
	applyAll(s, events.Deleted(late, events.KindAcceleratorQuota, v1beta1.RootName))
	if s.CapacityNeedsWrite() {
		t.Error("asks for a write to a root that does not exist")
	}
}

func TestUnattributed(t *testing.T) {
	s := guideState(t)
	gpu := map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("4"), "google.com/tpu": resource.MustParse("2"), "cpu": resource.MustParse("9")}
	applyAll(s,
		events.NodeUpserted(t0, &events.Node{Name: "odd-2", Capacity: gpu, Ready: true}),
		events.NodeUpserted(t0, &events.Node{Name: "odd-1", Capacity: gpu, Ready: true}),
	)
	want := []Unattributed{
		{"odd-1", "google.com/tpu", ReasonNoMatchingFlavor, 2000}, {"odd-1", "nvidia.com/gpu", ReasonNoMatchingFlavor, 4000},
		{"odd-2", "google.com/tpu", ReasonNoMatchingFlavor, 2000}, {"odd-2", "nvidia.com/gpu", ReasonNoMatchingFlavor, 4000},
	}
	if diff := cmp.Diff(want, s.Unattributed()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Unattributed{{Resource: "google.com/tpu", Amount: 4000}, {Resource: "nvidia.com/gpu", Amount: 8000}}, s.UnattributedTotals()); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
}

// TestMessagesAreBounded: a loop of 500 long names, and a team whose 16
// budgets all name missing flavors, get messages that name a few and
// count the rest, far below the CRD's 32,768 bytes for a condition message.
func TestMessagesAreBounded(t *testing.T) {
	s := guideState(t)
	const n = 500
	name := func(i int) string { return fmt.Sprintf("loop-%03d-%s", i, strings.Repeat("x", 54)) }
	var evs []events.Event
	for i := range n {
		evs = append(evs, quota(name(i), spec(v1beta1.RoleCohort, under(name((i+1)%n)))))
	}
	applyAll(s, evs...)
	for _, i := range []int{0, 1, n - 1} {
		st, _ := s.NodeStatus(name(i))
		if st.Reason != ReasonParentCycle || len(st.Message) > 1024 || !strings.Contains(st.Message, "... 493 more ...") ||
			!strings.HasPrefix(st.Message, "spec.parentRef leads back to this node ("+name(i)+" -> "+name((i+1)%n)) ||
			!strings.Contains(st.Message, name((i+n-1)%n)+" -> "+name(i)+")") {
			t.Errorf("%s: %s (%d bytes): %s", name(i), st.Reason, len(st.Message), st.Message)
		}
	}

	var opts []specOpt
	for i := range v1beta1.MaxBudgets {
		opts = append(opts, budget("nvidia.com/gpu", fmt.Sprintf("missing-%02d", i), "1"))
	}
	applyAll(s, quota("wide", spec(v1beta1.RoleClusterQueue, append(opts, under("root"))...)))
	st, _ := s.NodeStatus("wide")
	if got := strings.Count(st.Message, "; "); got != MaxListed || !strings.HasSuffix(st.Message, "; and 6 more") {
		t.Errorf("wide: %d parts: %s", got+1, st.Message)
	}
}
