package metrics

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"
)

// The committed docs/metrics.md is what the catalog generates.
func TestDocumentIsGenerated(t *testing.T) {
	got, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	require.Equal(t, Table(), string(got), "docs/metrics.md is stale: run make generate (go run ./hack/observability)")
}

// The catalog, and with it the document, lists exactly what the registry
// serves: same names, help texts and labels.
func TestCatalogMatchesRegistry(t *testing.T) {
	var want, got []string
	for _, s := range Catalog() {
		want = append(want, s.desc().String())
	}
	for _, d := range New().Descs() {
		got = append(got, d.String())
	}
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got)
}

func sample() Snapshot {
	return Snapshot{
		Plane: "workload",
		Budgets: []Budget{
			{Quota: "ml-research", Role: "Cohort", Resource: "nvidia.com/gpu", Flavor: "a100", Nominal: 24},
			{Quota: "team-beta", Role: "ClusterQueue", Resource: "nvidia.com/gpu", Flavor: "a100", Nominal: 8,
				Usage: &Usage{Admitted: 12, Reserved: 12, Borrowed: 4}},
		},
		Nodes: []Node{{Quota: "root", Role: "Cohort", Reason: "Admitted", Ready: true},
			{Quota: "big-team", Role: "ClusterQueue", Reason: "Frozen"}},
		Capacity: []Capacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: 24, Installed: 32, HighWater: 32,
			ObservedAt: time.Unix(1700000000, 500_000_000)}},
		Schedulable: 3, Cordoned: 1, NotReady: 2,
		Unattributed:       []Unattributed{{Resource: "nvidia.com/gpu", Reason: "NoMatchingFlavor", Amount: 16}},
		UnattributedNodes:  map[string]int{"NoMatchingFlavor": 2},
		DRAUnbudgeted:      map[string]int{"gpu.example.com": 3},
		EnrolledNamespaces: 1, ReportInterval: time.Minute, StreamDepth: 5,
	}
}

// The collector reads the state when scraped: without a source the state's
// gauges are absent, with one they show its figures, and a series whose
// cause is gone is absent from the next scrape without any reset.
func TestStateReadAtScrape(t *testing.T) {
	m := New()
	n, err := testutil.GatherAndCount(m.Registry, mBudgetNominal.Name)
	require.NoError(t, err)
	require.Zero(t, n, "no source, no budget series")

	snap := sample()
	m.SetSource(func() Snapshot { return snap })
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP ome_quota_budget_borrowed What a team uses above its nominal, borrowed from its cohort; on a management plane, the sum of its members' parts (ome_quota_budget_share_borrowed).
# TYPE ome_quota_budget_borrowed gauge
ome_quota_budget_borrowed{flavor="a100",plane="workload",quota="team-beta",resource="nvidia.com/gpu",role="ClusterQueue"} 4
# HELP ome_quota_node_ready 1 when a tree node is Ready, else 0; reason is Admitted or the rule it breaks (Frozen below a node that breaks one).
# TYPE ome_quota_node_ready gauge
ome_quota_node_ready{quota="big-team",reason="Frozen",role="ClusterQueue"} 0
ome_quota_node_ready{quota="root",reason="Admitted",role="Cohort"} 1
# HELP ome_quota_nodes Tree nodes per state: Ready, or the reason a node is not.
# TYPE ome_quota_nodes gauge
ome_quota_nodes{state="Frozen"} 1
ome_quota_nodes{state="Ready"} 1
# HELP ome_quota_capacity_observed_timestamp_seconds When the pair was last measured (root's observedAt), in Unix seconds.
# TYPE ome_quota_capacity_observed_timestamp_seconds gauge
ome_quota_capacity_observed_timestamp_seconds{flavor="a100",resource="nvidia.com/gpu"} 1.7000000005e+09
# HELP ome_quota_capacity_nodes Kubernetes Nodes by how capacity counts them: schedulable, cordoned, not_ready.
# TYPE ome_quota_capacity_nodes gauge
ome_quota_capacity_nodes{state="cordoned"} 1
ome_quota_capacity_nodes{state="not_ready"} 2
ome_quota_capacity_nodes{state="schedulable"} 3
# HELP ome_quota_capacity_unattributed Installed capacity that no ResourceFlavor's budget can use, per resource and reason.
# TYPE ome_quota_capacity_unattributed gauge
ome_quota_capacity_unattributed{reason="NoMatchingFlavor",resource="nvidia.com/gpu"} 16
# HELP ome_quota_event_stream_depth Events waiting in the stream.
# TYPE ome_quota_event_stream_depth gauge
ome_quota_event_stream_depth 5
`), mBudgetBorrowed.Name, mNodeReady.Name, mNodes.Name, mCapacityObserved.Name, mCapacityNodes.Name, mUnattributed.Name, mStreamDepth.Name))
	// Only the Cohort's budget has no usage series.
	n, err = testutil.GatherAndCount(m.Registry, mBudgetAdmitted.Name)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// A duplicated budget does not fail the scrape.
	snap.Budgets = append(snap.Budgets, snap.Budgets[1])
	n, err = testutil.GatherAndCount(m.Registry, mBudgetNominal.Name)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	snap.Unattributed, snap.UnattributedNodes = nil, nil
	n, err = testutil.GatherAndCount(m.Registry, mUnattributed.Name, mUnattributedNodes.Name)
	require.NoError(t, err)
	require.Zero(t, n, "the unattributed series are gone with their cause")
}

// Every family follows Prometheus' naming and help conventions (the checks
// promtool check metrics runs), the backend counters exist at 0 before the
// first pass, and build_info is 1.
func TestLint(t *testing.T) {
	m := New()
	m.SetSource(sample)
	m.Writes.WithLabelValues("ClusterQueue", "apply").Inc()
	m.WebhookReviewSeconds.WithLabelValues("allowed").Observe(0.001)
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Equal(t, 0.0, testutil.ToFloat64(m.Applied.WithLabelValues("LocalQueue")))
	n, err := testutil.GatherAndCount(m.Registry, mApplied.Name)
	require.NoError(t, err)
	require.Equal(t, len(ObjectKinds), n)
	n, err = testutil.GatherAndCount(m.Registry, mBuildInfo.Name)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A management plane publishes, per member, whether it answers, how long
// it has been silent, and the copies it lacks; per member and budget its
// share and its part of the team's usage, which add up to the team's
// budget gauges (plane="management"); and plane_info names the plane.
// Workload mode has none of the members' series.
func TestMemberSeries(t *testing.T) {
	m := New()
	now := time.Unix(1_800_000_000, 0)
	m.now = func() time.Time { return now }
	pair := func(cluster string, admitted, reserved, borrowed float64) ShareUsage {
		return ShareUsage{Quota: "team-a", Resource: "nvidia.com/gpu", Flavor: "a100", Cluster: cluster,
			Usage: Usage{Admitted: admitted, Reserved: reserved, Borrowed: borrowed}}
	}
	snap := Snapshot{Plane: "management",
		Members: []Member{{Cluster: "east", Reachable: true}, {Cluster: "west", CopiesBehind: 2, SilentSince: now.Add(-90 * time.Second)},
			{Cluster: "north"}},
		Budgets: []Budget{{Quota: "team-a", Role: "ClusterQueue", Resource: "nvidia.com/gpu", Flavor: "a100", Nominal: 8,
			Usage: &Usage{Admitted: 7, Reserved: 9, Borrowed: 1}}},
		Shares: []Share{{Quota: "team-a", Resource: "nvidia.com/gpu", Flavor: "a100", Cluster: "east", Nominal: 6},
			{Quota: "team-a", Resource: "nvidia.com/gpu", Flavor: "a100", Cluster: "west", Nominal: 2}},
		ShareUsage: []ShareUsage{pair("east", 5, 6, 1), pair("west", 2, 3, 0)},
	}
	m.SetSource(func() Snapshot { return snap })
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP ome_quota_budget_nominal A tree node's nominal budget per resource and flavor.
# TYPE ome_quota_budget_nominal gauge
ome_quota_budget_nominal{flavor="a100",plane="management",quota="team-a",resource="nvidia.com/gpu",role="ClusterQueue"} 8
# HELP ome_quota_budget_admitted What a team's admitted workloads use, from its ClusterQueue's status; on a management plane, the sum of its members' parts (ome_quota_budget_share_admitted).
# TYPE ome_quota_budget_admitted gauge
ome_quota_budget_admitted{flavor="a100",plane="management",quota="team-a",resource="nvidia.com/gpu",role="ClusterQueue"} 7
# HELP ome_quota_budget_share_admitted On a management plane, what a member cluster's Kueue admitted for its copy of a team, as the member last reported; ome_quota_budget_admitted{plane="management"} is their sum, so sum one or the other, never both.
# TYPE ome_quota_budget_share_admitted gauge
ome_quota_budget_share_admitted{cluster="east",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 5
ome_quota_budget_share_admitted{cluster="west",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 2
# HELP ome_quota_budget_share_reserved On a management plane, what a member cluster's workloads hold a quota reservation for under its copy of a team, as the member last reported; ome_quota_budget_reserved{plane="management"} is their sum.
# TYPE ome_quota_budget_share_reserved gauge
ome_quota_budget_share_reserved{cluster="east",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 6
ome_quota_budget_share_reserved{cluster="west",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 3
# HELP ome_quota_budget_share_borrowed On a management plane, what a member cluster's copy of a team uses above its share, borrowed from its cohort there, as the member last reported; ome_quota_budget_borrowed{plane="management"} is their sum.
# TYPE ome_quota_budget_share_borrowed gauge
ome_quota_budget_share_borrowed{cluster="east",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 1
ome_quota_budget_share_borrowed{cluster="west",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 0
# HELP ome_quota_member_reachable On a management plane, 1 while the member cluster answers and has reported, 0 while it does not (its shares and copies are kept as they were).
# TYPE ome_quota_member_reachable gauge
ome_quota_member_reachable{cluster="east"} 1
ome_quota_member_reachable{cluster="north"} 0
ome_quota_member_reachable{cluster="west"} 0
# HELP ome_quota_member_silent_seconds On a management plane, seconds since the plane last heard from the member cluster: 0 while it answers; else since its first failed read, or since the plane started listing it when it never answered.
# TYPE ome_quota_member_silent_seconds gauge
ome_quota_member_silent_seconds{cluster="east"} 0
ome_quota_member_silent_seconds{cluster="north"} 0
ome_quota_member_silent_seconds{cluster="west"} 90
# HELP ome_quota_budget_share On a management plane, a member cluster's share of a team's fleet budget: the nominal its copy there carries.
# TYPE ome_quota_budget_share gauge
ome_quota_budget_share{cluster="east",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 6
ome_quota_budget_share{cluster="west",flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 2
# HELP ome_quota_member_copies_behind On a management plane, the copies a member cluster should hold that it does not, or holds made from an older generation of their node, as it last reported.
# TYPE ome_quota_member_copies_behind gauge
ome_quota_member_copies_behind{cluster="east"} 0
ome_quota_member_copies_behind{cluster="north"} 0
ome_quota_member_copies_behind{cluster="west"} 2
# HELP ome_quota_plane_info Always 1; plane is the manager's mode (workload or management), as on the budget gauges. Series without a plane label take it from this one (group_left (plane)).
# TYPE ome_quota_plane_info gauge
ome_quota_plane_info{plane="management"} 1
`), mBudgetNominal.Name, mBudgetAdmitted.Name, mShareAdmitted.Name, mShareReserved.Name, mShareBorrowed.Name,
		mMemberReachable.Name, mMemberSilent.Name, mBudgetShare.Name, mMemberCopiesBehind.Name, mPlaneInfo.Name))

	// The clock is read at each scrape.
	now = now.Add(time.Minute)
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP ome_quota_member_silent_seconds On a management plane, seconds since the plane last heard from the member cluster: 0 while it answers; else since its first failed read, or since the plane started listing it when it never answered.
# TYPE ome_quota_member_silent_seconds gauge
ome_quota_member_silent_seconds{cluster="east"} 0
ome_quota_member_silent_seconds{cluster="north"} 0
ome_quota_member_silent_seconds{cluster="west"} 150
`), mMemberSilent.Name))

	snap = sample()
	n, err := testutil.GatherAndCount(m.Registry, mMemberReachable.Name, mMemberSilent.Name, mBudgetShare.Name, mMemberCopiesBehind.Name,
		mShareAdmitted.Name, mShareReserved.Name, mShareBorrowed.Name)
	require.NoError(t, err)
	require.Zero(t, n, "a workload manager has no members")
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP ome_quota_plane_info Always 1; plane is the manager's mode (workload or management), as on the budget gauges. Series without a plane label take it from this one (group_left (plane)).
# TYPE ome_quota_plane_info gauge
ome_quota_plane_info{plane="workload"} 1
`), mPlaneInfo.Name))
}
