package alerts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/metrics/dashboard"
)

// fleetFile holds the promtool tests on a fleet's series: a management
// plane and two members scraped together. Its first test is the healthy
// fleet, whose series the dashboard test reads too.
const fleetFile = "testdata/fleet_test.yaml"

type inputSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type fleetTests struct {
	Tests []struct {
		Name        string        `json:"name"`
		Interval    string        `json:"interval"`
		InputSeries []inputSeries `json:"input_series"`
		Alerts      []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `json:"exp_labels"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readFleet(t *testing.T) fleetTests {
	t.Helper()
	data, err := os.ReadFile(fleetFile)
	require.NoError(t, err)
	var f fleetTests
	require.NoError(t, yaml.Unmarshal(data, &f))
	require.NotEmpty(t, f.Tests)
	require.Equal(t, "fleet: healthy", f.Tests[0].Name, "the first test of %s is the healthy fleet", fleetFile)
	return f
}

// On the fleet, every alert is silent while all is well, and each but
// OmeQuotaManagerAbsent (absent() has no labels to group by) fires for
// the plane or the member whose own series call for it, with plane in its
// labels: promtool checks the labels and values (TestRulesUnitTests).
func TestEveryAlertOnAFleet(t *testing.T) {
	f := readFleet(t)
	silent := map[string]bool{}
	for _, a := range f.Tests[0].Alerts {
		require.Empty(t, a.ExpAlerts, "%s fires on the healthy fleet", a.Alertname)
		silent[a.Alertname] = true
	}
	withPlane := map[string]bool{}
	for _, tc := range f.Tests[1:] {
		for _, a := range tc.Alerts {
			for _, e := range a.ExpAlerts {
				require.Contains(t, []string{"management", "workload"}, e.ExpLabels["plane"], "%s fires in %q without a plane", a.Alertname, tc.Name)
				withPlane[a.Alertname] = true
			}
		}
	}
	for _, a := range alertNames(t) {
		require.True(t, silent[a], "%s is not evaluated on the healthy fleet", a)
		if a != "OmeQuotaManagerAbsent" {
			require.True(t, withPlane[a], "%s has no test where it fires on the fleet", a)
		}
	}
}

type expSample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

type exprTest struct {
	Expr       string      `json:"expr"`
	EvalTime   string      `json:"eval_time"`
	ExpSamples []expSample `json:"exp_samples"`
}

// TestDashboardOnAFleet evaluates every query of the chart's dashboard
// with promtool on the healthy fleet's series, for each plane: every
// series it returns carries that plane; on the management plane only the
// Fleet row's carry a cluster (a member), and on the workload plane every
// series carries one member's cluster, so no query adds or compares the
// plane's figures with a member's, or one member's with another's; the
// Fleet row's queries return nothing on the workload plane, every other
// query returns something on both; and the figures that add teams or
// replicas up equal each cluster's own.
func TestDashboardOnAFleet(t *testing.T) {
	f := readFleet(t)
	data, err := os.ReadFile("../../charts/ome-quota-manager/files/dashboard.json")
	require.NoError(t, err)
	qs, err := dashboard.Queries(data)
	require.NoError(t, err)
	const at = "30m"
	none := []expSample{}
	some := []expSample{{Labels: "{}", Value: 1}}
	only := func(label, value string) string {
		return ` unless on (` + label + `) label_replace(vector(1), "` + label + `", "` + value + `", "", "")`
	}
	var tests []exprTest
	for _, q := range qs {
		fleetRow := slices.ContainsFunc(dashboard.PlaneMetrics, func(m string) bool { return strings.Contains(q, m) })
		for _, plane := range []string{"management", "workload"} {
			e := "(" + dashboard.Expand(q, "5m", plane, ".*") + ")"
			tests = append(tests, exprTest{Expr: e + only("plane", plane), EvalTime: at, ExpSamples: none})
			switch {
			case plane == "workload" && fleetRow:
				tests = append(tests, exprTest{Expr: e, EvalTime: at, ExpSamples: none})
				continue
			case plane == "workload":
				tests = append(tests, exprTest{Expr: e + only("cluster", "east") + only("cluster", "west"), EvalTime: at, ExpSamples: none})
			case !fleetRow:
				tests = append(tests, exprTest{Expr: e + only("cluster", ""), EvalTime: at, ExpSamples: none})
			}
			tests = append(tests, exprTest{Expr: "count" + e + " > bool 0", EvalTime: at, ExpSamples: some})
		}
	}
	// The figures that add up: each plane's and each member's own.
	find := func(prefix string) string {
		for _, q := range qs {
			if strings.HasPrefix(q, prefix) {
				return q
			}
		}
		t.Fatalf("the dashboard has no query starting with %s", prefix)
		return ""
	}
	gpu := `resource="nvidia.com/gpu", flavor="a100"`
	for _, c := range []struct {
		query, plane string
		want         []expSample
	}{
		{"count by (plane, cluster) (ome_quota_plane_info", "management", []expSample{{`{plane="management"}`, 2}}},
		{"count by (plane, cluster) (ome_quota_plane_info", "workload", []expSample{{`{plane="workload", cluster="east"}`, 1}, {`{plane="workload", cluster="west"}`, 1}}},
		{"sum by (plane, cluster) (ome_quota_leader", "management", []expSample{{`{plane="management"}`, 1}}},
		{"sum by (plane, cluster) (ome_quota_leader", "workload", []expSample{{`{plane="workload", cluster="east"}`, 1}, {`{plane="workload", cluster="west"}`, 1}}},
		{"max by (plane, cluster, quota, resource, flavor) (ome_quota_budget_admitted", "management", []expSample{
			{`{plane="management", quota="team-a", ` + gpu + `}`, 7}, {`{plane="management", quota="team-b", ` + gpu + `}`, 3}}},
		{"max by (plane, cluster, quota, resource, flavor) (ome_quota_budget_admitted", "workload", []expSample{
			{`{plane="workload", cluster="east", quota="team-a", ` + gpu + `}`, 5}, {`{plane="workload", cluster="east", quota="team-b", ` + gpu + `}`, 3},
			{`{plane="workload", cluster="west", quota="team-a", ` + gpu + `}`, 2}, {`{plane="workload", cluster="west", quota="team-b", ` + gpu + `}`, 0}}},
		{"sum by (plane, cluster, resource, flavor) (max by (plane, cluster, quota, resource, flavor) (ome_quota_budget_admitted", "management", []expSample{
			{`{plane="management", ` + gpu + `}`, 10}}},
		{"sum by (plane, cluster, resource, flavor) (max by (plane, cluster, quota, resource, flavor) (ome_quota_budget_admitted", "workload", []expSample{
			{`{plane="workload", cluster="east", ` + gpu + `}`, 8}, {`{plane="workload", cluster="west", ` + gpu + `}`, 2}}},
		{"max by (plane, cluster, quota, resource, flavor) (ome_quota_budget_share_admitted", "management", []expSample{
			{`{plane="management", cluster="east", quota="team-a", ` + gpu + `}`, 5}, {`{plane="management", cluster="east", quota="team-b", ` + gpu + `}`, 3},
			{`{plane="management", cluster="west", quota="team-a", ` + gpu + `}`, 2}, {`{plane="management", cluster="west", quota="team-b", ` + gpu + `}`, 0}}},
		{"max by (plane, cluster, resource, flavor) (ome_quota_capacity_high_water_mark", "management", []expSample{{`{plane="management", ` + gpu + `}`, 16}}},
		{"max by (plane, cluster, resource, flavor) (ome_quota_capacity_high_water_mark", "workload", []expSample{
			{`{plane="workload", cluster="east", ` + gpu + `}`, 12}, {`{plane="workload", cluster="west", ` + gpu + `}`, 4}}},
	} {
		tests = append(tests, exprTest{Expr: dashboard.Expand(find(c.query), "5m", c.plane, ".*"), EvalTime: at, ExpSamples: c.want})
	}

	file := map[string]any{
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":         f.Tests[0].Interval,
			"input_series":     f.Tests[0].InputSeries,
			"promql_expr_test": tests,
		}},
	}
	out, err := yaml.Marshal(file)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard_test.yaml"), out, 0o600))
	require.Contains(t, promtool(t, dir, "test", "rules", "dashboard_test.yaml"), "SUCCESS")
	t.Logf("%d dashboard queries, %d checks on the fleet", len(qs), len(tests))
}
