package plane

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// On a management plane, a team's budget gauges carry the figures its
// status shows (the members' copies summed), each member's part is a
// series of its own that adds up to them, and a member that stopped
// answering says since when.
func TestPlaneMetricsMatchStatus(t *testing.T) {
	o := manager.DefaultOptions()
	o.Mode, o.MembersFrom, o.MembersNamespace = manager.ModeManagement, manager.MembersFromSecrets, "ome"
	m, p, err := newManager(o, &rest.Config{Host: "http://127.0.0.1:1"})
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
	// The plane's part of a scrape, and the budget gauges every mode has.
	var snap metrics.Snapshot
	m.View(func(st *state.State) { p.Snapshot(st, &snap) })
	reg := m.Metrics().Registry
	families, err := reg.Gather()
	require.NoError(t, err)
	type fig struct{ admitted, reserved, borrowed float64 }
	totals, parts := map[string]fig{}, map[string]fig{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["plane"] != "management" || labels["role"] != "ClusterQueue" {
				continue
			}
			fg, v := totals[labels["quota"]], mt.GetGauge().GetValue()
			switch f.GetName() {
			case "ome_quota_budget_admitted":
				fg.admitted = v
			case "ome_quota_budget_reserved":
				fg.reserved = v
			case "ome_quota_budget_borrowed":
				fg.borrowed = v
			default:
				continue
			}
			totals[labels["quota"]] = fg
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
