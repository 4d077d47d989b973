package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/metrics/dashboard"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const (
	rulesFile     = "../../charts/ome-quota-manager/files/alerts.yaml"
	dashboardFile = "../../charts/ome-quota-manager/files/dashboard.json"
	// rateWindow replaces Grafana's $__rate_interval: wide enough to hold
	// the whole scenario's samples at a 1 s scrape interval.
	rateWindow = "5m"
)

// probes are, per alert, parts of its expression that must return a series
// on a healthy cluster: the expression with its threshold comparison
// stripped, or for absent() and "and" the selectors it combines. Each must
// be a substring of the alert's expression, so they cannot drift from it.
var probes = map[string][]string{
	"OmeQuotaManagerAbsent":          {"ome_quota_build_info"},
	"OmeQuotaNoLeader":               {"sum by (plane, cluster) (ome_quota_leader * ignoring (plane) group_left (plane) ome_quota_plane_info)"},
	"OmeQuotaCapacityReportingStale": {"time() - max by (plane, cluster, resource, flavor) (ome_quota_capacity_observed_timestamp_seconds * ignoring (resource, flavor, plane) group_left (plane) ome_quota_plane_info)", "(3 * max by (plane, cluster) (ome_quota_capacity_report_interval_seconds * ignoring (plane) group_left (plane) ome_quota_plane_info) > 0)"},
	"OmeQuotaNodeNotReady":           {"min by (plane, cluster, quota, role, reason) (ome_quota_node_ready * ignoring (quota, role, reason, plane) group_left (plane) ome_quota_plane_info)"},
	"OmeQuotaBudgetAboveMark":        {"max by (plane, cluster, quota, role, resource, flavor) (ome_quota_budget_nominal)", "max by (plane, cluster, resource, flavor) (ome_quota_capacity_high_water_mark * ignoring (resource, flavor, plane) group_left (plane) ome_quota_plane_info)"},
	"OmeQuotaCapacityUnattributed":   {"max by (plane, cluster, reason) (ome_quota_capacity_unattributed_nodes * ignoring (reason, plane) group_left (plane) ome_quota_plane_info)"},
	"OmeQuotaMaterializationStalled": {"sum by (plane, cluster, job, instance) (increase(ome_quota_backend_applied_total[15m]) * ignoring (kind, plane) group_left (plane) ome_quota_plane_info)", "ome_quota_leader", "ome_quota_enrolled_namespaces", `ome_quota_nodes{state="Ready"}`},
	"OmeQuotaWriteErrors":            {"sum by (plane, cluster, job, instance, kind, verb) (rate(ome_quota_backend_write_errors_total[5m]) * ignoring (kind, verb, plane) group_left (plane) ome_quota_plane_info)"},
	"OmeQuotaWebhookErrors":          {`sum by (plane, cluster, job, instance) (rate(ome_quota_webhook_verdicts_total{verdict="unavailable"}[5m]) * ignoring (operation, verdict, plane) group_left (plane) ome_quota_plane_info)`},
	"OmeQuotaWebhookLatencyHigh":     {"histogram_quantile(0.99, sum by (plane, cluster, job, instance, le) (rate(ome_quota_webhook_review_seconds_bucket[5m]) * ignoring (verdict, le, plane) group_left (plane) ome_quota_plane_info))"},
	"OmeQuotaEventLagHigh":           {"histogram_quantile(0.99, sum by (plane, cluster, job, instance, le) (rate(ome_quota_event_lag_seconds_bucket[5m]) * ignoring (le, plane) group_left (plane) ome_quota_plane_info))"},
}

// planeAlerts read series that only a management plane publishes: this
// workload-mode scenario cannot probe them. test/fleet's plane tests show
// each series moving on a live plane (OmeQuotaFleetOverBudget's whole
// expression, through a real Prometheus, in TestForgetAGoneCluster), and
// test/alerts makes each fire.
var planeAlerts = map[string]bool{"OmeQuotaMemberUnreachable": true, "OmeQuotaCopiesNotConverging": true, "OmeQuotaMemberSilent": true,
	"OmeQuotaFleetOverBudget": true,
	// Not a plane's, but its series exists only where a replica compares
	// a NetworkPolicy (--webhook-network-policy), which this scenario
	// has none of: test/webhook's TestPolicyComparedWithTheAPIServer moves it on a live
	// replica, and test/alerts makes the alert fire.
	"OmeQuotaWebhookPolicyStale": true}

type sample struct {
	Metric map[string]string `json:"metric"`
}

// query evaluates expr now through Prometheus' HTTP API.
func query(t *testing.T, prom *localcluster.Prometheus, expr string) []sample {
	t.Helper()
	resp, err := http.Get(prom.URL + "/api/v1/query?query=" + url.QueryEscape(expr))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []sample `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	require.Equal(t, "success", r.Status, "query %s: %s", expr, r.Error)
	require.Equal(t, "vector", r.Data.ResultType, "query %s", expr)
	return r.Data.Result
}

type alert struct{ name, expr string }

func alerts(t *testing.T) []alert {
	data, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(data, &f))
	var out []alert
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, alert{r.Alert, r.Expr})
		}
	}
	require.Len(t, out, len(probes)+len(planeAlerts), "every alert has probes or is a plane's, and only alerts do")
	for name := range planeAlerts {
		require.NotContains(t, probes, name, "a plane's alert has no probes here")
	}
	return out
}

func condition(t *testing.T, name, typ string) (reason, message string) {
	aq, err := cluster.AQs.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", err.Error()
	}
	for _, c := range aq.Status.Conditions {
		if c.Type == typ {
			return string(c.Status) + " " + c.Reason, c.Message
		}
	}
	return "", ""
}

// TestPrometheusScrapesTheGuide: a Prometheus server scrapes the manager
// while the guide's scenario runs; every dashboard query and every alert
// expression returns series, promtool accepts a live scrape, and after the
// Node deletion that freezes big-team, the not-Ready alert's expression
// returns big-team and kubectl describe shows the Event naming the cause.
func TestPrometheusScrapesTheGuide(t *testing.T) {
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	testutil.GuideCluster(t, cluster)

	args := append([]string{"--enrolled-namespaces=ml-serving", "--capacity-report-interval=3s", "-v=2"}, testutil.InstallWebhook(t, cluster)...)
	m := testutil.StartManager(t, cluster, cluster.ManagerBin, "m1", args...)
	prom, err := localcluster.StartPrometheus(ctx, promDir, t.TempDir(), time.Second, fmt.Sprintf("127.0.0.1:%d", m.MetricsPort))
	require.NoError(t, err)
	t.Cleanup(prom.Stop)
	// Prometheus picks its targets up a few seconds after it starts: the
	// scenario begins once it scrapes.
	scrapes := func(n int) func() string {
		return func() string {
			if s := query(t, prom, fmt.Sprintf(`count_over_time(up[5m]) >= %d`, n)); len(s) == 0 {
				return fmt.Sprintf("fewer than %d scrapes of the manager", n)
			}
			return ""
		}
	}
	testutil.Eventually(t, 30*time.Second, scrapes(1))

	// The guide's tree, through the webhook, then a cohort whose budget
	// only fits while gpu-node-4 is there.
	out := testutil.Kubectl(t, cluster, "apply", "-f", "../../config/samples/quota-tree.yaml")
	require.Contains(t, out, "team-beta created")
	for _, o := range []any{
		aqtest.Cohort("big", "root").Budget("nvidia.com/gpu", "a100", "28").Obj(),
		aqtest.Team("big-team", "big").Budget("nvidia.com/gpu", "a100", "20").Obj(),
	} {
		data, err := yaml.Marshal(o)
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "aq.yaml")
		require.NoError(t, os.WriteFile(f, data, 0o600))
		testutil.Kubectl(t, cluster, "apply", "-f", f)
	}
	testutil.Eventually(t, 60*time.Second, func() string {
		for _, n := range []string{"team-alpha", "team-beta", "big", "big-team"} {
			if r, msg := condition(t, n, "Materialized"); r != "True Admitted" {
				return fmt.Sprintf("%s: Materialized %s %s", n, r, msg)
			}
		}
		return ""
	})

	t.Run("promtool check metrics accepts a live scrape", func(t *testing.T) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", m.MetricsPort))
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Contains(t, string(body), "ome_quota_build_info{")
		cmd := exec.Command(filepath.Join(promDir, "promtool"), "check", "metrics")
		cmd.Stdin = strings.NewReader(string(body))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool check metrics:\n%s", out)
		require.Empty(t, strings.TrimSpace(string(out)), "promtool check metrics found problems")
	})

	require.NoError(t, cluster.Kube.CoreV1().Nodes().Delete(ctx, "gpu-node-4", metav1.DeleteOptions{}))
	testutil.Eventually(t, 30*time.Second, func() string {
		if r, msg := condition(t, "big-team", "Ready"); r != "False Frozen" {
			return "big-team: Ready " + r + " " + msg
		}
		return ""
	})
	// Prometheus has scraped the frozen state, twice: a rate needs two samples.
	testutil.Eventually(t, 30*time.Second, func() string {
		if len(query(t, prom, `count_over_time(ome_quota_node_ready{quota="big-team",reason="Frozen"}[5m]) >= 2`)) == 0 {
			return "fewer than two scrapes of big-team frozen"
		}
		return ""
	})

	t.Run("the not-Ready alert's expression returns big-team", func(t *testing.T) {
		for _, a := range alerts(t) {
			if a.name != "OmeQuotaNodeNotReady" {
				continue
			}
			got := map[string]string{}
			for _, s := range query(t, prom, a.expr) {
				got[s.Metric["quota"]] = s.Metric["reason"]
			}
			require.Equal(t, map[string]string{"big-team": "Frozen", "big": "CapacityExceeded"}, got)
		}
	})

	t.Run("every dashboard query returns series", func(t *testing.T) {
		data, err := os.ReadFile(dashboardFile)
		require.NoError(t, err)
		qs, err := dashboard.Queries(data)
		require.NoError(t, err)
		require.NotEmpty(t, qs)
		for _, q := range qs {
			expr := dashboard.Expand(q, rateWindow, "workload", ".*")
			if slices.ContainsFunc(dashboard.PlaneMetrics, func(m string) bool { return strings.Contains(expr, m) }) {
				query(t, prom, expr) // valid; a workload cluster has no such series (test/fleet scrapes a plane's)
				continue
			}
			require.NotEmpty(t, query(t, prom, expr), "dashboard query returns nothing: %s", expr)
		}
		t.Logf("%d dashboard queries evaluated", len(qs))
	})

	t.Run("every alert expression evaluates, and its probes return series", func(t *testing.T) {
		for _, a := range alerts(t) {
			query(t, prom, a.expr) // valid against the live series; silent or not
			if planeAlerts[a.name] {
				continue
			}
			require.NotEmpty(t, probes[a.name], "no probes for %s", a.name)
			for _, p := range probes[a.name] {
				require.Contains(t, a.expr, p, "a probe of %s is not part of its expression", a.name)
				require.NotEmpty(t, query(t, prom, p), "%s: %s returns nothing", a.name, p)
			}
		}
	})

	t.Run("kubectl describe aq big-team shows the Event naming the cause", func(t *testing.T) {
		testutil.Eventually(t, 30*time.Second, func() string {
			out, err := cluster.Kubectl(ctx, "describe", "aq", "big-team")
			if err != nil {
				return err.Error()
			}
			i := strings.Index(out, "Events:")
			if i < 0 || !strings.Contains(out[i:], "Frozen") || !strings.Contains(out[i:], "ancestor big is CapacityExceeded") {
				return "no Frozen Event naming big:\n" + out
			}
			return ""
		})
		out, err := cluster.Kubectl(ctx, "describe", "aq", "big")
		require.NoError(t, err)
		require.Contains(t, out[strings.Index(out, "Events:"):], "CapacityExceeded")
		out, err = cluster.Kubectl(ctx, "describe", "aq", "root")
		require.NoError(t, err)
		require.Contains(t, out[strings.Index(out, "Events:"):], "CapacityMarkLowered")
	})

	t.Run("the node back thaws big-team, and the alert's expression is silent", func(t *testing.T) {
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.GPUNode("gpu-node-4", 8))
		require.NoError(t, err)
		testutil.Eventually(t, 30*time.Second, func() string {
			if r, msg := condition(t, "big-team", "Ready"); r != "True Admitted" {
				return "big-team: Ready " + r + " " + msg
			}
			return ""
		})
		testutil.Eventually(t, 30*time.Second, func() string {
			out, err := cluster.Kubectl(ctx, "describe", "aq", "big-team")
			if err != nil {
				return err.Error()
			}
			if !strings.Contains(out[strings.Index(out, "Events:"):], "Thawed") {
				return "no Thawed Event:\n" + out
			}
			return ""
		})
		for _, a := range alerts(t) {
			if a.name == "OmeQuotaNodeNotReady" {
				testutil.Eventually(t, 30*time.Second, func() string {
					if s := query(t, prom, a.expr); len(s) > 0 {
						return fmt.Sprintf("%s still returns %v", a.name, s)
					}
					return ""
				})
			}
		}
	})

	t.Run("a foreign ClusterQueue of a team's name: an ObjectConflict Event", func(t *testing.T) {
		_, err := kq.ClusterQueues().Create(ctx, localcluster.ForeignClusterQueue("team-gamma"), metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cluster.AQs.Create(ctx, aqtest.Team("team-gamma", "root").Budget("nvidia.com/gpu", "a100", "2").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		testutil.Eventually(t, 30*time.Second, func() string {
			out, err := cluster.Kubectl(ctx, "describe", "aq", "team-gamma")
			if err != nil {
				return err.Error()
			}
			i := strings.Index(out, "Events:")
			if i < 0 || !strings.Contains(out[i:], "ObjectConflict") || !strings.Contains(out[i:], "ClusterQueue team-gamma") {
				return "no ObjectConflict Event naming the ClusterQueue:\n" + out
			}
			return ""
		})
	})
}
