package observability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestPrometheusScrapesBothModes: the real Prometheus scrapes a manager
// started with its defaults over plain HTTP (the guide's port 8080 path),
// and one started with --metrics-secure over HTTPS with a ServiceAccount
// token bound to the chart's metrics-reader ClusterRole.
func TestPrometheusScrapesBothModes(t *testing.T) {
	ctx := context.Background()
	plain := testutil.StartManager(t, cluster, cluster.ManagerBin, "plain", "--webhook=false")

	const sa = "prometheus"
	_, err := cluster.Kube.CoreV1().ServiceAccounts("ome").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	testutil.GrantClusterRole(t, cluster, "ome-quota-manager-metrics-reader", "ome", sa,
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	token, err := cluster.ServiceAccountToken(ctx, "ome", sa)
	require.NoError(t, err)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	secure := testutil.StartManager(t, cluster, cluster.ManagerBin, "secure", "--webhook=false", "--metrics-secure=true")

	prom, err := localcluster.StartPrometheusScraping(ctx, promDir, dir, time.Second, fmt.Sprintf(`  - job_name: plain
    static_configs:
      - targets: ['127.0.0.1:%d']
  - job_name: secure
    scheme: https
    authorization:
      credentials_file: %s
    tls_config:
      insecure_skip_verify: true
    static_configs:
      - targets: ['127.0.0.1:%d']
`, plain.MetricsPort, tokenFile, secure.MetricsPort))
	require.NoError(t, err)
	t.Cleanup(prom.Stop)
	for _, job := range []string{"plain", "secure"} {
		testutil.Eventually(t, 60*time.Second, func() string {
			if s := query(t, prom, fmt.Sprintf(`up{job=%q} == 1 and on(instance) ome_quota_build_info{job=%q}`, job, job)); len(s) == 0 {
				return fmt.Sprintf("no successful scrape of the %s endpoint with the manager's metrics yet (log %s)", job, prom.Log)
			}
			return ""
		})
	}
}
