package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestRevokedNodeRightsStopTheStamps follows the guide's "Check that
// capacity reporting is alive": a manager whose right to read Nodes is
// revoked while it runs stops refreshing root's observedAt within one
// report interval, says so (ome_quota_capacity_source_failing and its
// log), and the stale-reporting alert, with its real expression, fires in
// the real Prometheus; restoring the right resumes the stamps.
func TestRevokedNodeRightsStopTheStamps(t *testing.T) {
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("liveness-node-%d", i)
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.GPUNode(name, 8))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cluster.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	testutil.A100Flavor(t, cluster)

	// The manager runs as a ServiceAccount with every right it uses, the
	// right on Nodes in a binding of its own.
	const sa = "liveness"
	_, err := cluster.Kube.CoreV1().ServiceAccounts("ome").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	require.NoError(t, err)
	roles := map[string][]rbacv1.PolicyRule{
		"liveness-all-but-nodes": {
			{APIGroups: []string{"ome.io", "kueue.x-k8s.io", "resource.k8s.io", "coordination.k8s.io", "admissionregistration.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"events", "namespaces", "configmaps"}, Verbs: []string{"*"}},
		},
		"liveness-nodes": {{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}
	for name, rules := range roles {
		testutil.GrantClusterRole(t, cluster, name, "ome", sa, rules...)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "sa.kubeconfig")
	require.NoError(t, cluster.WriteServiceAccountKubeconfig(ctx, "ome", sa, kubeconfig))

	const interval = 4 * time.Second
	m := testutil.StartManager(t, cluster, cluster.ManagerBin, "liveness", "--webhook=false", "--kubeconfig="+kubeconfig,
		"--capacity-report-interval="+interval.String(), "-v=1")

	// The stale-reporting alert, its expression as shipped, held 1 s
	// instead of 2 m.
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	held := strings.Replace(string(rules), "for: 2m", "for: 1s", 1)
	require.NotEqual(t, string(rules), held, "the stale-reporting alert holds for 2m")
	rulesPath := filepath.Join(dir, "alerts.yaml")
	require.NoError(t, os.WriteFile(rulesPath, []byte(held), 0o600))
	prom, err := localcluster.StartPrometheusScraping(ctx, promDir, dir, time.Second, fmt.Sprintf(`  - job_name: ome-quota-manager
    static_configs:
      - targets: ['127.0.0.1:%d']
rule_files:
  - %s
`, m.MetricsPort, rulesPath))
	require.NoError(t, err)
	t.Cleanup(prom.Stop)

	stamp := func() time.Time {
		root, err := cluster.AQs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return time.Time{} // the leader creates root once it leads
		}
		require.NoError(t, err)
		for _, c := range root.Status.Capacity {
			if c.ResourceName == "nvidia.com/gpu" && c.ResourceFlavor == "a100" {
				return c.ObservedAt.Time
			}
		}
		return time.Time{}
	}
	moves := func(what string) {
		t.Helper()
		first := stamp()
		testutil.Eventually(t, 3*interval+5*time.Second, func() string {
			if s := stamp(); !s.After(first) {
				return fmt.Sprintf("%s: observedAt stays %s", what, s)
			}
			return ""
		})
	}
	// Root and its first stamp come once the manager leads; from there on,
	// the stamp must move.
	testutil.Eventually(t, 30*time.Second, func() string {
		if stamp().IsZero() {
			return "root has no observedAt for nvidia.com/gpu@a100 yet"
		}
		return ""
	})
	moves("with the right")

	require.NoError(t, cluster.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, "liveness-nodes", metav1.DeleteOptions{}))
	revoked := time.Now()
	testutil.Eventually(t, 30*time.Second, func() string {
		if v, err := m.Metric(ctx, "ome_quota_capacity_source_failing", `source="nodes"`); err != nil || v != 1 {
			return fmt.Sprintf("ome_quota_capacity_source_failing{source=\"nodes\"} = %v, %v", v, err)
		}
		return ""
	})
	// No stamp later than one report interval after the revocation, for
	// three intervals.
	last := stamp()
	require.False(t, last.After(revoked.Add(interval)), "observedAt %s moved more than one interval after the revocation at %s", last, revoked)
	ticks := func() float64 {
		v, err := m.Metric(ctx, "ome_quota_events_total", `kind="Tick"`)
		require.NoError(t, err)
		return v
	}
	// Three ticks applied since: each would have restamped observedAt.
	before := ticks()
	testutil.Eventually(t, 30*time.Second, func() string {
		if n := ticks() - before; n < 3 {
			return fmt.Sprintf("%v ticks applied since the revocation was seen, want 3", n)
		}
		return ""
	})
	require.Equal(t, last, stamp(), "observedAt moved while the manager cannot read Nodes")
	testutil.Eventually(t, 30*time.Second, func() string {
		if !firing(t, prom, "OmeQuotaCapacityReportingStale") {
			return "the stale-reporting alert does not fire"
		}
		return ""
	})
	require.Contains(t, readFile(t, m.Log), "a capacity source fails")

	testutil.BindClusterRole(t, cluster, "liveness-nodes", "ome", sa)
	moves("with the right restored")
	testutil.Eventually(t, 30*time.Second, func() string {
		if v, err := m.Metric(ctx, "ome_quota_capacity_source_failing", `source="nodes"`); err != nil || v != 0 {
			return fmt.Sprintf("ome_quota_capacity_source_failing{source=\"nodes\"} = %v, %v", v, err)
		}
		return ""
	})
	require.Contains(t, readFile(t, m.Log), "a capacity source recovered")
}

// firing reports whether Prometheus holds alert name as firing.
func firing(t *testing.T, prom *localcluster.Prometheus, name string) bool {
	t.Helper()
	resp, err := http.Get(prom.URL + "/api/v1/alerts")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.State == "firing" {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
