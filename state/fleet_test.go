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

func fleetConfig(members ...string) events.Event {
	c := events.DefaultConfig()
	c.Mode, c.Members = events.ModeManagement, members
	return events.ConfigChanged(t0, c)
}

func gpus(flavor string, mark string) events.MemberCapacity {
	return events.MemberCapacity{Resource: "nvidia.com/gpu", Flavor: flavor, Allocatable: resource.MustParse(mark), HighWaterMark: resource.MustParse(mark)}
}

func fleetTeam(parent, nominal string, policy v1beta1.DistributionPolicy, shares ...v1beta1.ClusterShare) *v1beta1.AcceleratorQuotaSpec {
	return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: parent},
		Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse(nominal), Policy: policy, PerCluster: shares}}}
}

func share(cluster, nominal string) v1beta1.ClusterShare {
	return v1beta1.ClusterShare{Cluster: cluster, Nominal: resource.MustParse(nominal)}
}

// splitOf renders a team's split of gpu@a100 as "east=5,west=3", or its
// status when it has none.
func splitOf(s *State, node string) string {
	for _, sp := range s.Splits(node) {
		var parts []string
		for _, sh := range sp.Shares {
			parts = append(parts, sh.Cluster+"="+sh.Amount.String())
		}
		return strings.Join(parts, ",")
	}
	st, _ := s.NodeStatus(node)
	return string(st.Phase) + ": " + st.Message
}

func fleetState(t *testing.T) *State {
	t.Helper()
	s := New()
	applyAll(s, fleetConfig("west", "east"), events.Synced(t0),
		quota("root", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
		quota("ml", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"}}),
		quota("team-a", fleetTeam("ml", "8", "")),
		quota("team-b", fleetTeam("ml", "4", "", share("east", "3"), share("west", "1"))),
	)
	return s
}

// A Proportional split waits until every member has reported; an Explicit
// one does not. The shares follow the members' marks exactly, a member
// that stops answering keeps its share, and marks that are all 0 are an
// error on the node, not an even split.
func TestFleetShares(t *testing.T) {
	s := fleetState(t)
	if st, _ := s.NodeStatus("team-b"); st.Phase != PhaseFlavorMissing {
		t.Errorf("team-b on a flavor no member reported: %s, want FlavorMissing", st.Phase)
	}
	applyAll(s, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "6")}))
	if got, want := splitOf(s, "team-a"), "SplitInvalid: budget nvidia.com/gpu on a100: member cluster west has not reported its capacity yet"; !strings.HasPrefix(got, want) {
		t.Errorf("before west reported, team-a: %s, want it to start with %q", got, want)
	}
	if got := splitOf(s, "team-b"); got != "east=3,west=1" {
		t.Errorf("team-b's Explicit split: %s", got)
	}

	tr := applyAll(s, events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "2")}))
	if got := splitOf(s, "team-a"); got != "east=6,west=2" {
		t.Errorf("team-a over marks 6 and 2: %s", got)
	}
	for _, n := range []string{"team-a", "team-b", "ml"} {
		if st, _ := s.NodeStatus(n); st.Phase != PhaseReady {
			t.Errorf("%s: %s %s, want Ready", n, st.Phase, st.Message)
		}
	}
	if len(tr) == 0 {
		t.Error("members reporting moved no node")
	}

	// 8 over marks 6 and 4: 4.8 and 3.2, whole GPUs: the unit left goes
	// to the larger remainder.
	applyAll(s, events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "4")}))
	if got := splitOf(s, "team-a"); got != "east=5,west=3" {
		t.Errorf("team-a over marks 6 and 4: %s", got)
	}
	if got := s.HighWaterMark(Pair{"nvidia.com/gpu", "a100"}); got != AmountOf(resource.MustParse("10")) {
		t.Errorf("fleet mark %s, want 10", got)
	}

	// West stops answering: nothing moves, and it says why.
	rev, _ := s.Revision("team-a")
	if tr := applyAll(s, events.MemberLost(t0, "west", "dial tcp 10.0.0.2:6443: connection refused")); len(tr) != 0 {
		t.Errorf("an unreachable member moved nodes: %v", tr)
	}
	if got := splitOf(s, "team-a"); got != "east=5,west=3" {
		t.Errorf("team-a with west unreachable: %s", got)
	}
	if now, _ := s.Revision("team-a"); now == rev {
		t.Error("a member turning unreachable changed no node's projection, but every fleet node's status names it")
	}
	west := s.Members()[1]
	if west.Name != "west" || west.Reachable || !strings.Contains(west.Message, "connection refused") || len(west.Capacity) != 1 {
		t.Errorf("west as the state has it: %+v", west)
	}

	// Every mark 0: an error on the node, with what to do.
	applyAll(s, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "0")}),
		events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "0")}))
	if got := splitOf(s, "team-a"); !strings.Contains(got, "SplitInvalid: budget nvidia.com/gpu on a100: every member cluster's high-water mark is 0") {
		t.Errorf("team-a over zero marks: %s", got)
	}
	if err := checkInvariants(s); err != nil {
		t.Error(err)
	}
}

// An Explicit split is refused when it names a cluster that is not a
// member or adds up to more than the budget; a Member event of a cluster
// the configuration does not list changes nothing; a member removed from
// the configuration takes its marks along.
func TestFleetExplicitAndMembers(t *testing.T) {
	s := fleetState(t)
	applyAll(s, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "6")}),
		events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "6")}),
		quota("team-c", fleetTeam("root", "4", v1beta1.DistributionExplicit, share("north", "4"))),
		quota("team-d", fleetTeam("root", "4", v1beta1.DistributionExplicit, share("east", "3"), share("west", "2"))),
	)
	for node, want := range map[string]string{
		"team-c": "perCluster names north, which is not a member cluster of the fleet",
		"team-d": "the shares in perCluster add up to 5, more than the budget of 4",
	} {
		if got := splitOf(s, node); !strings.Contains(got, "SplitInvalid: ") || !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %q", node, got, want)
		}
	}
	before := s.Dump()
	applyAll(s, events.MemberSeen(t0, "north", []string{"a100"}, []events.MemberCapacity{gpus("a100", "100")}))
	if diff := cmp.Diff(strings.SplitN(before, "\n", 2)[1], strings.SplitN(s.Dump(), "\n", 2)[1]); diff != "" {
		t.Errorf("an unlisted cluster's event changed the state (-before +after):\n%s", diff)
	}

	// The configuration drops west: its mark leaves the fleet's sum, and
	// Proportional shares go to the members that remain.
	applyAll(s, fleetConfig("east"))
	if got := splitOf(s, "team-a"); got != "east=8" {
		t.Errorf("team-a with east alone: %s", got)
	}
	if got := s.HighWaterMark(Pair{"nvidia.com/gpu", "a100"}); got != AmountOf(resource.MustParse("6")) {
		t.Errorf("fleet mark %s, want 6", got)
	}
}

// Outside a management plane nothing is split, and the split fields
// change no verdict.
func TestWorkloadModeSplitsNothing(t *testing.T) {
	s := guideState(t)
	applyAll(s, quota("team-x", fleetTeam("ml-research", "4", v1beta1.DistributionExplicit, share("nowhere", "9"))))
	if sp := s.Splits("team-x"); sp != nil {
		t.Errorf("workload mode split team-x: %v", sp)
	}
	if st, _ := s.NodeStatus("team-x"); st.Phase == PhaseSplitInvalid {
		t.Errorf("workload mode judged a split: %s", st.Message)
	}
}

// The reducer and the rule book from scratch agree on a fleet tree once
// every member has reported.
func TestFleetAgreesWithEvaluate(t *testing.T) {
	s := fleetState(t)
	applyAll(s, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "0")}),
		events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "0")}),
		quota("team-c", fleetTeam("root", "4", v1beta1.DistributionExplicit, share("north", "4"))))
	tree := Tree{}
	var want []Violation
	for _, n := range s.Nodes() {
		tree[n.Name] = n.Spec
	}
	for _, n := range s.Nodes() {
		want = append(want, n.Violations...)
	}
	marks := map[Pair]Amount{}
	got := Evaluate(tree, marks, map[string]bool{"a100": true}, s.Config())
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reducer vs Evaluate (-reducer +evaluate):\n%s", diff)
	}
	if !slicesContainReason(got, ReasonSplitInvalid) {
		t.Error("no SplitInvalid in the tree: the test proves nothing")
	}
}

func slicesContainReason(vs []Violation, r Reason) bool {
	for _, v := range vs {
		if v.Reason == r {
			return true
		}
	}
	return false
}

// A plane that restarts reads back from root's status what it kept of
// each member, so the shares stand before any member answers; a member's
// own report then wins, and a stale read-back changes nothing.
func TestFleetSeedsFromRootsStatus(t *testing.T) {
	kept := func(east, west string) []v1beta1.CapacityStatus {
		return []v1beta1.CapacityStatus{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", PerCluster: []v1beta1.ClusterCapacity{
			{Cluster: "east", Allocatable: resource.MustParse(east), HighWaterMark: resource.MustParse(east)},
			{Cluster: "north", Allocatable: resource.MustParse("99"), HighWaterMark: resource.MustParse("99")},
			{Cluster: "west", Allocatable: resource.MustParse(west), HighWaterMark: resource.MustParse(west)},
		}}}
	}
	s := New()
	applyAll(s, fleetConfig("west", "east"),
		events.QuotaUpserted(t0, &events.Quota{Name: "root", Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}, Capacity: kept("6", "2")}),
		quota("team-a", fleetTeam("root", "8", "")), events.Synced(t0))
	if got := splitOf(s, "team-a"); got != "east=6,west=2" {
		t.Fatalf("team-a after a restart, before any member answered: %s", got)
	}
	if got := s.HighWaterMark(Pair{"nvidia.com/gpu", "a100"}); got != AmountOf(resource.MustParse("8")) {
		t.Errorf("fleet mark %s, want 8 (north is no member)", got)
	}
	if west := s.Members()[1]; west.Reachable || !strings.Contains(west.Message, "what root's status kept") {
		t.Errorf("west before it answered: %+v", west)
	}
	if tr := applyAll(s, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "6")})); len(tr) != 0 {
		t.Errorf("east answering with what was kept moved nodes: %v", tr)
	}
	applyAll(s, events.QuotaUpserted(t0, &events.Quota{Name: "root", Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}, Capacity: kept("1", "1")}))
	if got := splitOf(s, "team-a"); got != "east=6,west=2" {
		t.Errorf("a stale read-back moved the shares: %s", got)
	}
	applyAll(s, events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "10")}))
	if got := splitOf(s, "team-a"); got != "east=3,west=5" {
		t.Errorf("after west answered with 10: %s", got)
	}
	if err := checkInvariants(s); err != nil {
		t.Error(err)
	}
}

// On a plane, root's capacity is the members' figures summed per pair,
// with each member's part by cluster name; written to root and read back
// by a plane that restarts, it gives the same shares before any member
// answers, and asks for no rewrite.
func TestFleetCapacityStatus(t *testing.T) {
	s := New()
	applyAll(s, fleetConfig("west", "east"), events.Synced(t0),
		quota("root", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
		quota("team-a", fleetTeam("root", "6", v1beta1.DistributionProportional)),
		events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}),
		events.MemberSeen(t0, "east", []string{"a100", "h100"}, []events.MemberCapacity{gpus("a100", "16"), gpus("h100", "4")}))
	got := s.CapacityStatus()
	q := resource.MustParse
	at := metav1.NewTime(t0.UTC().Truncate(time.Second)) // the last report's
	want := []v1beta1.CapacityStatus{
		{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Allocatable: q("24"), HighWaterMark: q("24"), ObservedAt: at, PerCluster: []v1beta1.ClusterCapacity{
			{Cluster: "east", Allocatable: q("16"), HighWaterMark: q("16")}, {Cluster: "west", Allocatable: q("8"), HighWaterMark: q("8")}}},
		{ResourceName: "nvidia.com/gpu", ResourceFlavor: "h100", Allocatable: q("4"), HighWaterMark: q("4"), ObservedAt: at, PerCluster: []v1beta1.ClusterCapacity{
			{Cluster: "east", Allocatable: q("4"), HighWaterMark: q("4")}}},
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); d != "" {
		t.Fatalf("root's capacity on a plane (-want +got):\n%s", d)
	}
	if got := splitOf(s, "team-a"); got != "east=4,west=2" {
		t.Fatalf("team-a: %s", got)
	}
	if !s.CapacityNeedsWrite() {
		t.Error("root's stored status holds nothing yet, but no write is asked for")
	}
	root := func(c []v1beta1.CapacityStatus) events.Event {
		return events.QuotaUpserted(t0, &events.Quota{Name: "root", Generation: 1, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}, Capacity: c})
	}
	applyAll(s, root(got))
	if s.CapacityNeedsWrite() {
		t.Error("root's stored status is the state's, but a rewrite is asked for")
	}
	// A tick a report interval later restamps while both members answer,
	// and not while one does not.
	every := events.DefaultConfig().ReportInterval.Duration
	later := t0.Add(every)
	applyAll(s, events.Tick(later))
	if got := s.CapacityStatus()[0].ObservedAt.Time; !got.Equal(later.UTC().Truncate(time.Second)) {
		t.Errorf("after a tick with every member answering, observedAt %s, want %s", got, later)
	}
	applyAll(s, events.MemberLost(later, "west", "cut"), events.Tick(later.Add(every)))
	if got := s.CapacityStatus()[0].ObservedAt.Time; !got.Equal(later.UTC().Truncate(time.Second)) {
		t.Errorf("after a tick with west not answering, observedAt %s, want it kept at %s", got, later)
	}
	again := New()
	applyAll(again, fleetConfig("west", "east"), root(got), quota("team-a", fleetTeam("root", "6", v1beta1.DistributionProportional)), events.Synced(t0))
	if got := splitOf(again, "team-a"); got != "east=4,west=2" {
		t.Errorf("team-a on a restarted plane, before any member answered: %s", got)
	}
}

func joined(cluster string) events.Event {
	return events.MembershipChanged(t0, cluster, events.Membership{Member: true, Source: "ClusterProfile fleet/" + cluster})
}

func left(cluster string) events.Event {
	return events.MembershipChanged(t0, cluster, events.Membership{Source: "ClusterProfile fleet/" + cluster, Message: "its ClusterProfile fleet/" + cluster + " was deleted"})
}

func names(views []MemberView) string {
	var out []string
	for _, v := range views {
		out = append(out, v.Name)
	}
	return strings.Join(out, ",")
}

// Members come and go as Membership events. A member that joins holds
// the Proportional splits until it reports, then takes its share; one
// that leaves while it holds copies is kept as leaving until it reports
// none (or for as long as it does not answer), and an Explicit split that
// still names it holds the node.
func TestFleetMembership(t *testing.T) {
	s := New()
	c := events.DefaultConfig()
	c.Mode = events.ModeManagement
	applyAll(s, events.ConfigChanged(t0, c), joined("east"), joined("west"), events.Synced(t0),
		quota("root", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
		quota("ml", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"}}),
		quota("team-a", fleetTeam("ml", "9", "")),
		quota("team-b", fleetTeam("ml", "4", "", share("east", "3"), share("west", "1"))),
		events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}),
		events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}),
	)
	if got := splitOf(s, "team-a"); got != "east=5,west=4" {
		t.Fatalf("team-a over two members: %s", got)
	}

	// A third member joins: the Proportional split is held until it reports.
	applyAll(s, joined("south"))
	if got := names(s.Members()); got != "east,south,west" {
		t.Errorf("members after south joined: %s", got)
	}
	if got, want := splitOf(s, "team-a"), "SplitInvalid: budget nvidia.com/gpu on a100: member cluster south has not reported"; !strings.HasPrefix(got, want) {
		t.Errorf("before south reported, team-a: %s, want it to start with %q", got, want)
	}
	applyAll(s, events.MemberSeen(t0, "south", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}))
	if got := splitOf(s, "team-a"); got != "east=3,south=3,west=3" {
		t.Errorf("team-a over three members: %s", got)
	}
	if mv := s.Members()[1]; mv.Inventory.Source != "ClusterProfile fleet/south" {
		t.Errorf("south's inventory entry: %+v", mv.Inventory)
	}

	// west holds copies and leaves: it is leaving until it reports none.
	seen := events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")})
	seen.Member.Copies = []events.MemberCopy{{Node: "ml", Applied: 1}, {Node: "team-a", Applied: 1}}
	applyAll(s, seen, left("west"))
	if got := names(s.Members()); got != "east,south" {
		t.Errorf("members after west left: %s", got)
	}
	if got := names(s.Leaving()); got != "west" {
		t.Errorf("leaving after west left with copies: %q", got)
	}
	if got := splitOf(s, "team-a"); got != "east=5,south=4" {
		t.Errorf("team-a once west left: %s", got)
	}
	if got, want := splitOf(s, "team-b"), "SplitInvalid: budget nvidia.com/gpu on a100: perCluster names west, which is not a member cluster"; !strings.HasPrefix(got, want) {
		t.Errorf("team-b's Explicit split naming west: %s, want it to start with %q", got, want)
	}
	if _, ok := s.CopyOn("west", "team-a"); ok {
		t.Errorf("a cluster that left is not a member whose copies count")
	}
	// Cut off, it stays leaving; answering with no copy left, it is
	// forgotten.
	applyAll(s, events.MemberLost(t0, "west", "dial tcp: connection refused"))
	if l := s.Leaving(); len(l) != 1 || l[0].Reachable || len(l[0].Copies) != 2 {
		t.Errorf("west cut off while leaving: %+v", l)
	}
	applyAll(s, events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}))
	if l := s.Leaving(); l != nil {
		t.Errorf("west answering with no copy: still leaving %+v", l)
	}

	// A member that leaves holding nothing, and does not answer, is
	// forgotten at once; one that comes back starts unreported.
	applyAll(s, events.MemberLost(t0, "south", "gone"), left("south"))
	if l := s.Leaving(); l != nil {
		t.Errorf("south left unreachable with no copy known: %+v", l)
	}
	applyAll(s, joined("south"))
	if mv := s.Members()[1]; mv.Name != "south" || mv.Reported {
		t.Errorf("south back: %+v", mv)
	}
	// An event for a cluster that is neither a member nor leaving
	// changes nothing.
	before := s.Clone()
	applyAll(s, events.MemberSeen(t0, "nowhere", []string{"h100"}, []events.MemberCapacity{gpus("h100", "80")}))
	if s.FlavorExists("h100") || names(s.Members()) != names(before.Members()) {
		t.Errorf("a report of a stranger counted")
	}
}

// On a plane, a team's usage is what its members last reported of their
// copies, summed per pair (admitted, reserved and borrowed); each member's
// part stays readable, a member that stops answering keeps its last part,
// and a workload cluster's team reads its ClusterQueue's usage instead.
func TestFleetTeamUsage(t *testing.T) {
	s := fleetState(t)
	used := func(node, admitted, reserved, borrowed string) events.MemberUsage {
		return events.MemberUsage{Node: node, Resource: "nvidia.com/gpu", Flavor: "a100",
			Admitted: resource.MustParse(admitted), Reserved: resource.MustParse(reserved), Borrowed: resource.MustParse(borrowed)}
	}
	seen := func(cluster string, usage ...events.MemberUsage) events.Event {
		ev := events.MemberSeen(t0, cluster, []string{"a100"}, []events.MemberCapacity{gpus("a100", "6")})
		ev.Member.Usage = usage
		return ev
	}
	if u := s.TeamUsage("team-b"); u != nil {
		t.Errorf("team-b before any member reported usage: %v, want none", u)
	}
	applyAll(s, seen("east", used("team-a", "4", "5", "1"), used("team-b", "3", "3", "0")),
		seen("west", used("team-a", "2", "2.5", "0")))
	render := func(us []events.Usage) string {
		var parts []string
		for _, u := range us {
			parts = append(parts, u.Resource+"@"+u.Flavor+" "+u.Admitted.String()+"/"+u.Reserved.String()+"/"+u.Borrowed.String())
		}
		return strings.Join(parts, ", ")
	}
	if got, want := render(s.TeamUsage("team-a")), "nvidia.com/gpu@a100 6/7500m/1"; got != want {
		t.Errorf("team-a's fleet usage (admitted/reserved/borrowed): %s, want %s", got, want)
	}
	if got, want := render(s.TeamUsage("team-b")), "nvidia.com/gpu@a100 3/3/0"; got != want {
		t.Errorf("team-b's fleet usage: %s, want %s", got, want)
	}
	parts := func(node string) string {
		var out []string
		for _, u := range s.MemberUsage(node) {
			out = append(out, u.Cluster+" "+u.Admitted.String()+"/"+u.Reserved.String()+"/"+u.Borrowed.String())
		}
		return strings.Join(out, ", ")
	}
	if got, want := parts("team-a"), "east 4/5/1, west 2/2500m/0"; got != want {
		t.Errorf("team-a's parts: %s, want %s", got, want)
	}

	// A change of reserved alone is a change: the node's status shows it.
	rev, _ := s.Revision("team-a")
	applyAll(s, seen("west", used("team-a", "2", "3", "0")))
	if now, _ := s.Revision("team-a"); now == rev {
		t.Error("west reserving more changed nothing of team-a")
	}
	if got, want := render(s.TeamUsage("team-a")), "nvidia.com/gpu@a100 6/8/1"; got != want {
		t.Errorf("team-a after west reserved more: %s, want %s", got, want)
	}
	// West stops answering: its last report still counts.
	applyAll(s, events.MemberLost(t0, "west", "dial tcp: connection refused"))
	if got, want := render(s.TeamUsage("team-a")), "nvidia.com/gpu@a100 6/8/1"; got != want {
		t.Errorf("team-a with west unreachable: %s, want %s", got, want)
	}

	w := guideState(t)
	applyAll(w, events.QueueUpserted(t0, &events.Queue{Name: "team-alpha", Managed: true, Usage: []events.Usage{{Resource: "nvidia.com/gpu", Flavor: "a100",
		Admitted: resource.MustParse("4"), Reserved: resource.MustParse("6"), Borrowed: resource.MustParse("0")}}}))
	if got, want := render(w.TeamUsage("team-alpha")), render(w.Usage("team-alpha")); got != want || got == "" {
		t.Errorf("a workload cluster's team usage: %q, want its ClusterQueue's %q", got, want)
	}
}

// Each member says since when it answers or does not: from the Member
// event that flipped it, or from when the plane started listing it; a
// report that changes nothing of its reachability keeps the time.
func TestFleetMemberSince(t *testing.T) {
	s := fleetState(t)
	since := func() string {
		var parts []string
		for _, mv := range s.Members() {
			parts = append(parts, fmt.Sprintf("%s %v %s", mv.Name, mv.Reachable, mv.Since.Sub(t0)))
		}
		return strings.Join(parts, ", ")
	}
	if got, want := since(), "east false 0s, west false 0s"; got != want {
		t.Errorf("listed, never heard from: %s, want %s", got, want)
	}
	at := func(d time.Duration, ev events.Event) events.Event { ev.Time = t0.Add(d); return ev }
	applyAll(s, at(time.Minute, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "6")})),
		at(2*time.Minute, events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")})),
		at(3*time.Minute, events.MemberLost(t0, "west", "dial tcp: connection refused")),
		at(4*time.Minute, events.MemberLost(t0, "west", "dial tcp: i/o timeout")))
	if got, want := since(), "east true 1m0s, west false 0s"; got != want {
		t.Errorf("east answering since its first report, west never: %s, want %s", got, want)
	}
	applyAll(s, at(5*time.Minute, events.MemberLost(t0, "east", "dial tcp: connection refused")),
		at(6*time.Minute, events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "2")})))
	if got, want := since(), "east false 5m0s, west true 6m0s"; got != want {
		t.Errorf("east lost, west answering: %s, want %s", got, want)
	}
}
