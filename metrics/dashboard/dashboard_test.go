package dashboard

import (
	"encoding/json"
	"os"
	"regexp"
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
