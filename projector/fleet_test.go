package projector

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// On a plane, a team's status lists each member's share of each budget;
// root's lists each member's capacity; in workload mode neither is there.
func TestFleetStatus(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	s := state.New()
	for _, ev := range aqtest.FleetEvents(t0, "6", "2", aqtest.Root().Obj(),
		aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "4").Obj(),
		aqtest.Team("team-b", "root").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj()) {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	out := Project(FromState(s, nil, nil))
	shares := func(name string) string {
		var parts []string
		for _, b := range out.Statuses[name].Budgets {
			for _, pc := range b.PerCluster {
				parts = append(parts, fmt.Sprintf("%s@%s %s=%s", b.ResourceName, b.ResourceFlavor, pc.Cluster, pc.Nominal.String()))
			}
		}
		return strings.Join(parts, ", ")
	}
	if got := shares("team-a"); got != "nvidia.com/gpu@a100 east=3, nvidia.com/gpu@a100 west=1" {
		t.Errorf("team-a's shares in its status: %q", got)
	}
	if got := shares("team-b"); got != "nvidia.com/gpu@a100 east=3" {
		t.Errorf("team-b's shares in its status: %q", got)
	}
	// What each member's Kueue admitted, reserved and borrowed for its
	// copy, per member and summed.
	seen := events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
		Allocatable: resource.MustParse("6"), HighWaterMark: resource.MustParse("6")}})
	seen.Member.Usage = []events.MemberUsage{{Node: "team-a", Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse("3"), Reserved: resource.MustParse("4"), Borrowed: resource.MustParse("1")}}
	seen.Seq = s.LastSeq() + 1
	s.Apply(seen)
	out = Project(FromState(s, nil, nil))
	var used []string
	for _, b := range out.Statuses["team-a"].Budgets {
		used = append(used, fmt.Sprintf("total %s/%s/%s", b.Admitted.String(), b.Reserved.String(), b.Borrowed.String()))
		for _, pc := range b.PerCluster {
			used = append(used, fmt.Sprintf("%s %s/%s/%s", pc.Cluster, pc.Admitted.String(), pc.Reserved.String(), pc.Borrowed.String()))
		}
	}
	if got := strings.Join(used, ", "); got != "total 3/4/1, east 3/4/1, west 0/0/0" {
		t.Errorf("team-a's admitted/reserved/borrowed in its status: %q", got)
	}
	if got := out.Statuses["team-a"].Summary.Admitted; got != "3" {
		t.Errorf("team-a's ADMITTED column on the plane: %q, want the members' 3", got)
	}

	// status.clusters: the copy east holds (made from generation 1, in
	// Kueue), none yet on west where team-a has a share, and west cut off.
	seen.Member.Copies = []events.MemberCopy{{Node: "team-a", Applied: 1, Materialized: 1}}
	seen.Seq = s.LastSeq() + 1
	s.Apply(seen)
	clusters := func() string {
		var parts []string
		for _, c := range Project(FromState(s, nil, nil)).Statuses["team-a"].Clusters {
			parts = append(parts, fmt.Sprintf("%s %d/%d %s", c.Cluster, c.AppliedGeneration, c.MaterializedGeneration, c.Message))
		}
		return strings.Join(parts, "; ")
	}
	if got := clusters(); got != "east 1/1 ; west 0/0 the member holds no copy of this node yet" {
		t.Errorf("team-a's status.clusters: %q", got)
	}
	lost := events.MemberLost(t0, "west", "dial tcp: connection refused")
	lost.Seq = s.LastSeq() + 1
	s.Apply(lost)
	if got := clusters(); !strings.HasPrefix(got, "east 1/1 ; west 0/0 ClusterUnreachable: the plane does not hear from this member") {
		t.Errorf("team-a's status.clusters with west cut off: %q", got)
	}
	var capacity []string
	for _, c := range out.Statuses[v1beta1.RootName].Capacity {
		for _, pc := range c.PerCluster {
			capacity = append(capacity, fmt.Sprintf("%s %s/%s", pc.Cluster, pc.Allocatable.String(), pc.HighWaterMark.String()))
		}
		capacity = append(capacity, fmt.Sprintf("fleet %s/%s", c.Allocatable.String(), c.HighWaterMark.String()))
	}
	if got := strings.Join(capacity, ", "); got != "east 6/6, west 2/2, fleet 8/8" {
		t.Errorf("root's capacity on the plane: %q", got)
	}
	// Materialized says how the members hold the copies: pending until the
	// copier reports, then its outcome.
	materialized := func(name string) string {
		for _, c := range out.Statuses[name].Conditions {
			if c.Type == v1beta1.ConditionMaterialized {
				return string(c.Status) + " " + c.Reason + ": " + c.Message
			}
		}
		return "none"
	}
	if got := materialized("team-a"); got != "False Pending: "+msgPendingApply {
		t.Errorf("team-a before the copier reported: %s", got)
	}
	conflict := events.Outcome{Kind: events.OutcomeConflict, Message: "member east: the member holds a node of its own named team-a"}
	ev := events.OutcomeReported(t0, "team-a", conflict)
	ev.Seq = s.LastSeq() + 1
	s.Apply(ev)
	out = Project(FromState(s, nil, nil))
	if got := materialized("team-a"); got != "False ObjectConflict: "+conflict.Message {
		t.Errorf("team-a after the copier found a conflict: %s", got)
	}
}

// BenchmarkFleetShares is the plane's pure work at 100 and 1,000 member
// clusters (from its inventory) and 1,000 Proportional teams under 10
// Cohorts: one member's mark moving (every team's split made again); every
// member's copies computed; the last member reporting what its Kueue
// admitted for each of its copies; one more member joining and reporting
// (every split held, then made again over one more), and leaving.
func BenchmarkFleetShares(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("members-%d", n), func(b *testing.B) { benchmarkFleetShares(b, n) })
	}
}

func benchmarkFleetShares(b *testing.B, n int) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	c := events.DefaultConfig()
	c.Mode, c.Origin = events.ModeManagement, "plane"
	var members []string
	for i := range n {
		members = append(members, fmt.Sprintf("member-%04d", i))
	}
	last, extra := members[n-1], fmt.Sprintf("member-%04d", n)
	s := state.New()
	apply := func(ev events.Event) {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	apply(events.ConfigChanged(t0, c))
	for _, m := range members {
		apply(events.MembershipChanged(t0, m, events.Membership{Member: true, Source: "ClusterProfile fleet/" + m}))
	}
	apply(events.Synced(t0))
	mark := func(n int) []events.MemberCapacity {
		q := resource.MustParse(fmt.Sprint(n))
		return []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: q, HighWaterMark: q}}
	}
	for i, m := range members {
		apply(events.MemberSeen(t0, m, []string{"a100"}, mark(64+i)))
	}
	apply(events.QuotaUpserted(t0, &events.Quota{Name: "root", Spec: aqtest.Root().Obj().Spec}))
	for g := range 10 {
		apply(events.QuotaUpserted(t0, &events.Quota{Name: fmt.Sprintf("group-%d", g), Spec: aqtest.Cohort(fmt.Sprintf("group-%d", g), "root").Obj().Spec}))
	}
	for i := range 1000 {
		name := fmt.Sprintf("team-%04d", i)
		spec := aqtest.Team(name, fmt.Sprintf("group-%d", i%10)).Budget("nvidia.com/gpu", "a100", fmt.Sprint(1+i%7)).Obj().Spec
		apply(events.QuotaUpserted(t0, &events.Quota{Name: name, Spec: spec}))
	}
	if st, _ := s.NodeStatus("team-0999"); !st.Ready() {
		b.Fatalf("team-0999: %s %s", st.Phase, st.Message)
	}
	b.Run("mark-moves", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			apply(events.MemberSeen(t0, members[n/2], []string{"a100"}, mark(100+i%2)))
		}
	})
	b.Run("copies-every-member", func(b *testing.B) {
		copies := 0
		for b.Loop() {
			nodes := FleetFromState(s)
			copies = 0
			for _, m := range members {
				copies += len(Copies(nodes, m, "plane").Copies)
			}
		}
		b.ReportMetric(float64(copies), "copies")
	})
	b.Run("usage-report", func(b *testing.B) {
		// The last member's copies (the largest member holds the most), each
		// team's usage moving by one GPU.
		want := Copies(FleetFromState(s), last, "plane").Copies
		for i := 0; b.Loop(); i++ {
			ev := events.MemberSeen(t0, last, []string{"a100"}, mark(64+n-1))
			for _, cp := range want {
				ev.Member.Copies = append(ev.Member.Copies, events.MemberCopy{Node: cp.Name, Applied: 1, Materialized: 1})
				if cp.Spec.Role == v1beta1.RoleClusterQueue {
					ev.Member.Usage = append(ev.Member.Usage, events.MemberUsage{Node: cp.Name, Resource: "nvidia.com/gpu", Flavor: "a100",
						Admitted: resource.MustParse(fmt.Sprint(i % 2))})
				}
			}
			apply(ev)
		}
		b.ReportMetric(float64(len(want)), "copies")
	})
	b.Run("member-joins-and-leaves", func(b *testing.B) {
		for b.Loop() {
			apply(events.MembershipChanged(t0, extra, events.Membership{Member: true, Source: "ClusterProfile fleet/" + extra}))
			apply(events.MemberSeen(t0, extra, []string{"a100"}, mark(64)))
			apply(events.MembershipChanged(t0, extra, events.Membership{Source: "ClusterProfile fleet/" + extra, Message: "deleted"}))
		}
	})
}

// A node's status.clusters says what the fleet's inventory reports of a
// member's control plane when it is not healthy, and lists a cluster that
// left the fleet while it holds the node's copy: being deleted while the
// plane reaches it, to be released by its admin while it does not.
func TestFleetStatusInventory(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	c := events.DefaultConfig()
	c.Mode, c.Origin = events.ModeManagement, "fleet"
	s := state.New()
	apply := func(ev events.Event) {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	mark := []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: resource.MustParse("8"), HighWaterMark: resource.MustParse("8")}}
	apply(events.ConfigChanged(t0, c))
	for _, m := range []string{"east", "west"} {
		apply(events.MembershipChanged(t0, m, events.Membership{Member: true, Source: "ClusterProfile fleet/" + m, Health: "True"}))
	}
	apply(events.Synced(t0))
	apply(events.QuotaUpserted(t0, &events.Quota{Name: "root", Spec: aqtest.Root().Obj().Spec}))
	apply(events.QuotaUpserted(t0, &events.Quota{Name: "team-a", Generation: 1, Spec: aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "4").Obj().Spec}))
	for _, m := range []string{"east", "west"} {
		seen := events.MemberSeen(t0, m, []string{"a100"}, mark)
		seen.Member.Copies = []events.MemberCopy{{Node: "team-a", Applied: 1, Materialized: 1}}
		apply(seen)
	}
	apply(events.MembershipChanged(t0, "east", events.Membership{Member: true, Source: "ClusterProfile fleet/east", Health: "False", Message: "Probe: the API server does not answer"}))
	apply(events.MembershipChanged(t0, "west", events.Membership{Source: "ClusterProfile fleet/west", Message: "its ClusterProfile fleet/west was deleted"}))
	messages := func() []string {
		n, _ := NodeFromState(s, "team-a")
		var out []string
		for _, cs := range ProjectNode(&n, Settings(s, nil, nil)).Status.Clusters {
			out = append(out, cs.Cluster+": "+cs.Message)
		}
		return out
	}
	want := []string{
		"east: its inventory (ClusterProfile fleet/east) reports its control plane healthy False: Probe: the API server does not answer",
		"west: ClusterLeaving: this cluster left the fleet; the plane deletes its copy",
	}
	if diff := cmp.Diff(want, messages()); diff != "" {
		t.Errorf("team-a's status.clusters (-want +got):\n%s", diff)
	}
	apply(events.MemberLost(t0, "west", "dial tcp: connection refused"))
	want[1] = "west: ClusterLeaving: this cluster left the fleet, but the plane does not reach it to delete its copy (dial tcp: connection refused); its cluster-admin can release the plane's copies there with kubectl ome quota release --origin fleet"
	if diff := cmp.Diff(want, messages()); diff != "" {
		t.Errorf("team-a's status.clusters once west is cut off (-want +got):\n%s", diff)
	}
}
