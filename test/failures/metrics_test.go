package failures

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// scrape GETs /metrics over HTTPS with the bearer token, if any.
func scrape(t *testing.T, m *localcluster.Manager, token string) (int, string, *tls.ConnectionState) {
	t.Helper()
	return get(t, m, "/metrics", token)
}

// get GETs a path of the metrics endpoint over HTTPS with the bearer
// token, if any.
func get(t *testing.T, m *localcluster.Manager, path, token string) (int, string, *tls.ConnectionState) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test checks the certificate itself
	}}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", m.MetricsPort, path), nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.TLS
}

// apiserverRequests counts the API server's requests for a resource, from
// its own metrics.
func apiserverRequests(t *testing.T, resource string) float64 {
	t.Helper()
	raw, err := cluster.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="`+resource+`"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			require.NoError(t, err)
			sum += v
		}
	}
	return sum
}

// TestMetricsNeedAuthorizedToken: /metrics is HTTPS, and only a scraper
// whose bearer token the API server authenticates (TokenReview) and allows
// to get the non-resource URL /metrics (SubjectAccessReview) reads it. The
// answers are cached, so repeated scrapes cost the API server nothing
// more. --metrics-cert-dir serves a given certificate. --profiling serves
// Go's profiles behind the same checks, to whom may get /debug/pprof/*.
func TestMetricsNeedAuthorizedToken(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	crt, key, err := cert.GenerateSelfSignedCertKey("metrics.ome.test", nil, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600))
	m := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "secure-metrics", "--webhook=false", "--metrics-secure=true", "--metrics-cert-dir="+dir, "--profiling")

	// No token: 401, over TLS with the given certificate.
	var state *tls.ConnectionState
	testutil.Eventually(t, 30*time.Second, func() string {
		code, body, st := scrape(t, m, "")
		if code != http.StatusUnauthorized {
			return fmt.Sprintf("without a token: %d %s", code, body)
		}
		state = st
		return ""
	})
	require.NotNil(t, state)
	require.Equal(t, []string{"metrics.ome.test"}, state.PeerCertificates[0].DNSNames)

	// A ServiceAccount's token, without the right: 403.
	const sa = "metrics-scraper"
	_, err = cluster.Kube.CoreV1().ServiceAccounts("ome").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	require.NoError(t, err)
	token, err := cluster.ServiceAccountToken(ctx, "ome", sa)
	require.NoError(t, err)
	code, body, _ := scrape(t, m, token)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, "Forbidden: system:serviceaccount:ome:"+sa+" may not get /metrics")
	code, _, _ = scrape(t, m, "not-a-token")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _, _ = get(t, m, "/debug/pprof/", "")
	require.Equal(t, http.StatusUnauthorized, code, "profiles without a token")

	// The ClusterRole docs/manager.md gives a Prometheus, bound to it.
	testutil.GrantClusterRole(t, cluster, "ome-quota-manager-metrics-reader", "ome", sa,
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	// A denial is cached for 30 s.
	testutil.Eventually(t, 60*time.Second, func() string {
		code, body, _ := scrape(t, m, token)
		if code != http.StatusOK || !strings.Contains(body, "ome_quota_events_total") {
			return fmt.Sprintf("with the right: %d %.200s", code, body)
		}
		return ""
	})

	// Scrapes now cost the API server no review: the answers are cached.
	reviews := apiserverRequests(t, "tokenreviews") + apiserverRequests(t, "subjectaccessreviews")
	for range 10 {
		code, _, _ := scrape(t, m, token)
		require.Equal(t, http.StatusOK, code)
	}
	require.Equal(t, reviews, apiserverRequests(t, "tokenreviews")+apiserverRequests(t, "subjectaccessreviews"),
		"10 scrapes sent reviews to the API server")

	// The right to /metrics is not the right to the profiles; a role for
	// /debug/pprof/* is.
	code, body, _ = get(t, m, "/debug/pprof/", token)
	require.Equal(t, http.StatusForbidden, code, body)
	testutil.GrantClusterRole(t, cluster, "ome-quota-manager-profile-reader", "ome", sa,
		rbacv1.PolicyRule{NonResourceURLs: []string{"/debug/pprof/*"}, Verbs: []string{"get"}})
	testutil.Eventually(t, 60*time.Second, func() string {
		code, body, _ := get(t, m, "/debug/pprof/goroutine?debug=1", token)
		if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
			return fmt.Sprintf("with the right to the profiles: %d %.200s", code, body)
		}
		return ""
	})
}
