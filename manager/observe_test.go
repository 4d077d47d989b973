package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// Scrapes run while the consumer applies events: each reads a consistent
// snapshot under the reducer's lock (run with -race), and once the events
// are applied the gauges show the state's figures.
func TestMetricsReadStateWhileEventsApply(t *testing.T) {
	o := DefaultOptions()
	o.EnrolledNamespaces = []string{"ml-serving"}
	m, err := New(o, &rest.Config{Host: "http://127.0.0.1:1"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	go func() { consumed <- m.consume(ctx) }()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var scrapes atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := m.metrics.Registry.Gather(); err != nil {
				t.Error(err)
				return
			}
			scrapes.Add(1)
		}
	}()
	// Scrapes run before, while and after the events apply.
	require.Eventually(t, func() bool { return scrapes.Load() > 0 }, 10*time.Second, time.Millisecond)

	now := time.Unix(1_800_000_000, 0)
	publish := func(ev events.Event) {
		_, err := m.stream.Publish(ctx, ev)
		require.NoError(t, err)
	}
	publish(events.ConfigChanged(now, o.EventsConfig()))
	publish(events.FlavorUpserted(now, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}))
	gpus := func(n string) map[string]resource.Quantity {
		return map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse(n)}
	}
	for i := range 4 {
		publish(events.NodeUpserted(now, &events.Node{Name: fmt.Sprintf("gpu-%d", i), Labels: map[string]string{"gpu": "a100"},
			Capacity: gpus("8"), Allocatable: gpus("8"), Ready: i != 3, Unschedulable: i == 2}))
	}
	publish(events.NodeUpserted(now, &events.Node{Name: "stray", Capacity: gpus("2"), Allocatable: gpus("2"), Ready: true}))
	publish(events.Synced(now))
	for _, q := range aqtest.GuideTree() {
		publish(events.QuotaUpserted(now, &events.Quota{Name: q.Name, Generation: 1, Spec: q.Spec}))
	}
	require.Eventually(t, func() bool { return m.stream.Len() == 0 && m.metricsSnapshot().Budgets != nil }, 10*time.Second, 10*time.Millisecond)
	// The last event may still be applying: wait for the state to hold every node.
	require.Eventually(t, func() bool { return len(m.metricsSnapshot().Nodes) == len(aqtest.GuideTree()) }, 10*time.Second, 10*time.Millisecond)
	applied := scrapes.Load()
	require.Eventually(t, func() bool { return scrapes.Load() > applied }, 10*time.Second, time.Millisecond)
	close(stop)
	wg.Wait()

	reg := m.metrics.Registry
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ome_quota_capacity_nodes Kubernetes Nodes by how capacity counts them: schedulable, cordoned, not_ready.
# TYPE ome_quota_capacity_nodes gauge
ome_quota_capacity_nodes{state="cordoned"} 1
ome_quota_capacity_nodes{state="not_ready"} 1
ome_quota_capacity_nodes{state="schedulable"} 3
# HELP ome_quota_capacity_unattributed Installed capacity that no ResourceFlavor's budget can use, per resource and reason.
# TYPE ome_quota_capacity_unattributed gauge
ome_quota_capacity_unattributed{reason="NoMatchingFlavor",resource="nvidia.com/gpu"} 2
# HELP ome_quota_capacity_unattributed_nodes Nodes carrying unattributed capacity, per reason.
# TYPE ome_quota_capacity_unattributed_nodes gauge
ome_quota_capacity_unattributed_nodes{reason="AmbiguousFlavor"} 0
ome_quota_capacity_unattributed_nodes{reason="NoMatchingFlavor"} 1
# HELP ome_quota_capacity_unavailable Accelerators on cordoned or NotReady nodes, per resource and flavor: installed, so in the mark, but not allocatable.
# TYPE ome_quota_capacity_unavailable gauge
ome_quota_capacity_unavailable{flavor="a100",resource="google.com/tpu"} 0
ome_quota_capacity_unavailable{flavor="a100",resource="nvidia.com/gpu"} 16
# HELP ome_quota_capacity_high_water_mark The damped peak of installed capacity that budgets are checked against.
# TYPE ome_quota_capacity_high_water_mark gauge
ome_quota_capacity_high_water_mark{flavor="a100",resource="google.com/tpu"} 0
ome_quota_capacity_high_water_mark{flavor="a100",resource="nvidia.com/gpu"} 32
# HELP ome_quota_capacity_allocatable Accelerators on Ready, uncordoned nodes, per resource and flavor.
# TYPE ome_quota_capacity_allocatable gauge
ome_quota_capacity_allocatable{flavor="a100",resource="google.com/tpu"} 0
ome_quota_capacity_allocatable{flavor="a100",resource="nvidia.com/gpu"} 16
# HELP ome_quota_enrolled_namespaces Namespaces enrolled for LocalQueues; while 0 nothing is written to Kueue.
# TYPE ome_quota_enrolled_namespaces gauge
ome_quota_enrolled_namespaces 1
# HELP ome_quota_capacity_report_interval_seconds The configured --capacity-report-interval; 0 when the refresh of observedAt is off.
# TYPE ome_quota_capacity_report_interval_seconds gauge
ome_quota_capacity_report_interval_seconds 60
`), "ome_quota_capacity_nodes", "ome_quota_capacity_unattributed", "ome_quota_capacity_unattributed_nodes", "ome_quota_capacity_unavailable",
		"ome_quota_capacity_high_water_mark", "ome_quota_capacity_allocatable", "ome_quota_enrolled_namespaces",
		"ome_quota_capacity_report_interval_seconds"))
	n, err := testutil.GatherAndCount(reg, "ome_quota_node_ready")
	require.NoError(t, err)
	require.Equal(t, len(aqtest.GuideTree()), n, "one readiness series per tree node")
	n, err = testutil.GatherAndCount(reg, "ome_quota_budget_admitted")
	require.NoError(t, err)
	require.Equal(t, 2, n, "usage series for the two teams' budgets only")
	cancel()
	require.NoError(t, <-consumed)
}

// On a management plane, a team's budget gauges carry the figures its
// status shows (the members' copies summed), each member's part is a
// series of its own that adds up to them, and a member that stopped
// answering says since when.
func TestPlaneMetricsMatchStatus(t *testing.T) {
	o := DefaultOptions()
	o.Mode, o.MembersFrom, o.MembersNamespace = ModeManagement, MembersFromSecrets, "ome"
	m, err := NewPlane(o, &rest.Config{Host: "http://127.0.0.1:1"})
	require.NoError(t, err)
	t0 := time.Unix(1_800_000_000, 0).UTC()
	qty := resource.MustParse
	seen := func(cluster, mark string, usage ...events.MemberUsage) events.Event {
		ev := events.MemberSeen(t0, cluster, []string{"a100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
			Allocatable: qty(mark), HighWaterMark: qty(mark)}})
		ev.Member.Usage = usage
		return ev
	}
	used := func(team, admitted, reserved, borrowed string) events.MemberUsage {
		return events.MemberUsage{Node: team, Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: qty(admitted), Reserved: qty(reserved), Borrowed: qty(borrowed)}
	}
	evs := aqtest.FleetEvents(t0, "6", "2", aqtest.Root().Obj(),
		aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "4").Obj(),
		aqtest.Team("team-b", "root").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj())
	evs = append(evs, seen("east", "6", used("team-a", "3", "4", "1"), used("team-b", "2", "2", "0")),
		seen("west", "2", used("team-a", "1500m", "2", "0")))
	lost := events.MemberLost(t0.Add(time.Minute), "west", "dial tcp: connection refused")
	evs = append(evs, lost)
	var statuses map[string]*v1beta1.AcceleratorQuotaStatus
	m.View(func(st *state.State) {
		for _, ev := range evs {
			ev.Seq = st.LastSeq() + 1
			st.Apply(ev)
		}
		statuses = projector.Project(projector.FromState(st, nil, nil)).Statuses
	})
	snap := m.metricsSnapshot()
	require.Equal(t, "management", snap.Plane)

	type fig struct{ admitted, reserved, borrowed float64 }
	totals, parts := map[string]fig{}, map[string]fig{}
	for _, b := range snap.Budgets {
		if b.Usage != nil {
			totals[b.Quota] = fig{b.Usage.Admitted, b.Usage.Reserved, b.Usage.Borrowed}
		}
	}
	sums := map[string]fig{}
	for _, u := range snap.ShareUsage {
		parts[u.Quota+"/"+u.Cluster] = fig{u.Admitted, u.Reserved, u.Borrowed}
		s := sums[u.Quota]
		sums[u.Quota] = fig{s.admitted + u.Admitted, s.reserved + u.Reserved, s.borrowed + u.Borrowed}
	}
	want, wantParts := map[string]fig{}, map[string]fig{}
	for _, team := range []string{"team-a", "team-b"} {
		for _, b := range statuses[team].Budgets {
			want[team] = fig{b.Admitted.AsApproximateFloat64(), b.Reserved.AsApproximateFloat64(), b.Borrowed.AsApproximateFloat64()}
			for _, pc := range b.PerCluster {
				wantParts[team+"/"+pc.Cluster] = fig{pc.Admitted.AsApproximateFloat64(), pc.Reserved.AsApproximateFloat64(), pc.Borrowed.AsApproximateFloat64()}
			}
		}
	}
	require.Equal(t, map[string]fig{"team-a": {4.5, 6, 1}, "team-b": {2, 2, 0}}, want, "the teams' status on the plane")
	require.Equal(t, want, totals, "the budget gauges carry the status's figures")
	require.Equal(t, want, sums, "each team's parts add up to its budget gauges")
	require.Equal(t, wantParts, parts, "each member's part is the one its status lists")

	silent := map[string]time.Time{}
	for _, mb := range snap.Members {
		silent[mb.Cluster] = mb.SilentSince
	}
	require.Equal(t, map[string]time.Time{"east": {}, "west": lost.Time}, silent, "west silent since its first failed read")

	reg := m.metrics.Registry
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ome_quota_budget_admitted What a team's admitted workloads use, from its ClusterQueue's status; on a management plane, the sum of its members' parts (ome_quota_budget_share_admitted).
# TYPE ome_quota_budget_admitted gauge
ome_quota_budget_admitted{flavor="a100",plane="management",quota="team-a",resource="nvidia.com/gpu",role="ClusterQueue"} 4.5
ome_quota_budget_admitted{flavor="a100",plane="management",quota="team-b",resource="nvidia.com/gpu",role="ClusterQueue"} 2
# HELP ome_quota_budget_share_admitted On a management plane, what a member cluster's Kueue admitted for its copy of a team, as the member last reported; ome_quota_budget_admitted{plane="management"} is their sum, so sum one or the other, never both.
# TYPE ome_quota_budget_share_admitted gauge
ome_quota_budget_share_admitted{cluster="east",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 3
ome_quota_budget_share_admitted{cluster="east",flavor="a100",quota="team-b",resource="nvidia.com/gpu"} 2
ome_quota_budget_share_admitted{cluster="west",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 1.5
# HELP ome_quota_plane_info Always 1; plane is the manager's mode (workload or management), as on the budget gauges. Series without a plane label take it from this one (group_left (plane)).
# TYPE ome_quota_plane_info gauge
ome_quota_plane_info{plane="management"} 1
`), "ome_quota_budget_admitted", "ome_quota_budget_share_admitted", "ome_quota_plane_info"))
}
