package dashboard

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/metrics"
)

const committed = "../../charts/ome-quota-manager/files/dashboard.json"

// The chart ships what the code generates.
func TestCommittedJSONIsGenerated(t *testing.T) {
	want, err := JSON()
	require.NoError(t, err)
	got, err := os.ReadFile(committed)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "%s is stale: run make generate (go run ./hack/observability)", committed)
}

// Every metric a query names is one the manager serves; the e2e suite
// (test/observability) then evaluates each query against a real Prometheus.
func TestQueriesNameServedMetrics(t *testing.T) {
	served := map[string]bool{}
	for _, s := range metrics.Catalog() {
		served[s.Name] = true
		if s.Type == metrics.Histogram {
			served[s.Name+"_bucket"] = true
		}
	}
	data, err := JSON()
	require.NoError(t, err)
	qs, err := Queries(data)
	require.NoError(t, err)
	require.NotEmpty(t, qs)
	name := regexp.MustCompile(`\bome_quota_[a-z_]+`)
	for _, q := range qs {
		ms := name.FindAllString(q, -1)
		require.NotEmpty(t, ms, "query names no metric of the manager: %s", q)
		for _, m := range ms {
			require.True(t, served[m], "query %s names %s, which the manager does not serve", q, m)
		}
	}
	var d map[string]any
	require.NoError(t, json.Unmarshal(data, &d))
	require.True(t, strings.Contains(string(data), `"uid": "${datasource}"`), "panels read the dashboard's data source variable")
}

// Every query reads one plane: a budget gauge through its own plane label,
// every other series joined with ome_quota_plane_info on the dashboard's
// plane, ignoring exactly the series' own labels (the catalog's), and
// every aggregation keeps plane and cluster. So a Prometheus that scrapes
// a management plane and its members together never adds a fleet total to
// a member's figure; test/alerts evaluates the queries on such a fleet.
func TestEveryQueryReadsOnePlane(t *testing.T) {
	labels := map[string][]string{}
	for _, s := range metrics.Catalog() {
		labels[s.Name] = s.Labels
		if s.Type == metrics.Histogram {
			labels[s.Name+"_bucket"] = append(slices.Clone(s.Labels), "le")
		}
	}
	data, err := JSON()
	require.NoError(t, err)
	qs, err := Queries(data)
	require.NoError(t, err)
	use := regexp.MustCompile(`\b(ome_quota_[a-z_]+)(\{[^}]*\})?(\[[^\]]*\]\)|\))?( \* ignoring \(([^)]*)\) group_left \(plane\) ome_quota_plane_info\{(plane="management",)?plane="\$plane"\})?`)
	group := regexp.MustCompile(`\bby \(([^)]*)\)`)
	for _, q := range qs {
		require.Contains(t, q, `plane="$plane"`, "query reads every plane: %s", q)
		for _, m := range use.FindAllStringSubmatch(q, -1) {
			name, joined, ignored := m[1], m[4] != "", m[5]
			if name == "ome_quota_plane_info" {
				continue
			}
			own, ok := labels[name]
			require.True(t, ok, "query %s names %s, which the manager does not serve", q, name)
			if slices.Contains(own, "plane") {
				require.Contains(t, m[2], `plane="$plane"`, "query %s reads %s of every plane", q, name)
				continue
			}
			require.True(t, joined, "query %s reads %s without joining ome_quota_plane_info", q, name)
			require.Equal(t, strings.Join(append(slices.Clone(own), "plane"), ", "), ignored,
				"query %s joins %s ignoring other labels than its own", q, name)
			require.Equal(t, slices.Contains(own, "cluster"), m[6] != "",
				"query %s joins %s with the plane's info alone exactly when its own labels hold cluster", q, name)
		}
		for _, g := range group.FindAllStringSubmatch(q, -1) {
			require.True(t, strings.HasPrefix(g[1], "plane, cluster"), "query %s aggregates away plane or cluster: by (%s)", q, g[1])
		}
		if strings.Contains(q, "member") || strings.Contains(q, "budget_share") {
			require.Contains(t, q, `cluster=~"$cluster"`, "a Fleet panel's query shows the chosen members: %s", q)
		}
	}
	var d struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &d))
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	require.Equal(t, []string{"datasource", "plane", "cluster"}, vars)
}
