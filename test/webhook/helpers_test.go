package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/cert"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
	"ome.io/quota-manager/webhook"
)

const (
	gpu        = "nvidia.com/gpu"
	ns         = "ome"
	secretName = "ome-quota-manager-webhook-cert"
	configName = webhook.DefaultConfigName
	// deniedBy is how kubectl introduces the webhook's denials.
	deniedBy = `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request: `

	capacityJSONPath = `jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.allocatable}{" "}{.highWaterMark}{"\n"}{end}`
)

// Short lease timings, so that a replica that stops hands over in seconds.
var leaseFlags = []string{
	"--leader-election-lease-duration=4s",
	"--leader-election-renew-deadline=3s",
	"--leader-election-retry-period=500ms",
	"--capacity-report-interval=3s",
}

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	return filepath.Join(root, rel)
}

// eventually and normalize are testutil's, by short names.
var (
	eventually = testutil.Eventually
	normalize  = testutil.Normalize
)

// denied runs a kubectl command that must fail with the webhook's denial,
// and returns what follows "denied the request: " on its last line.
func denied(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := testutil.RunKubectl(t, cluster, stdin, args...)
	if err == nil {
		t.Fatalf("kubectl %s succeeded, want a denial:\n%s%s", strings.Join(args, " "), out, errOut)
	}
	last := strings.TrimSpace(errOut)
	last = last[strings.LastIndex(last, "\n")+1:]
	i := strings.Index(last, deniedBy)
	if i < 0 {
		t.Fatalf("kubectl %s failed without the webhook's denial:\n%s", strings.Join(args, " "), errOut)
	}
	return last[i+len(deniedBy):]
}

// guideTree is the guide's quota-tree.yaml.
func guideTree(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "config/samples/quota-tree.yaml"))
	require.NoError(t, err)
	return string(b)
}

// ensureGuideTree applies the guide's tree, whatever is there already.
func ensureGuideTree(t *testing.T) {
	t.Helper()
	testutil.MustKubectl(t, cluster, guideTree(t), "apply", "-f", "-")
}

// resetSecret deletes the webhook's Secret and creates it again empty, as
// the chart does.
func resetSecret(t *testing.T) {
	t.Helper()
	deleteSecret(t)
	createEmptySecret(t)
}

// ensureSecret creates the empty Secret unless it exists.
func ensureSecret(t *testing.T) {
	t.Helper()
	if _, err := cluster.Kube.CoreV1().Secrets(ns).Get(context.Background(), secretName, metav1.GetOptions{}); err != nil {
		createEmptySecret(t)
	}
}

func createEmptySecret(t *testing.T) {
	t.Helper()
	require.NoError(t, cluster.CreateWebhookSecret(context.Background()))
}

func deleteSecret(t *testing.T) {
	t.Helper()
	err := cluster.Kube.CoreV1().Secrets(ns).Delete(context.Background(), secretName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func getSecret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := cluster.Kube.CoreV1().Secrets(ns).Get(context.Background(), secretName, metav1.GetOptions{})
	require.NoError(t, err)
	return s
}

// installConfig creates the chart's ValidatingWebhookConfiguration, with
// the Service swapped for the webhook on 127.0.0.1:port, replacing any
// left by an earlier test; it is removed when the test ends.
func installConfig(t *testing.T, port int) {
	t.Helper()
	deleteConfig(t)
	require.NoError(t, cluster.CreateWebhookConfig(context.Background(), port))
	t.Cleanup(func() { deleteConfig(t) })
}

func deleteConfig(t *testing.T) {
	err := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), configName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func caBundle(t *testing.T) []byte {
	t.Helper()
	cfg, err := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), configName, metav1.GetOptions{})
	require.NoError(t, err)
	return cfg.Webhooks[0].ClientConfig.CABundle
}

// replica is a manager process bound to a test.
type replica struct {
	*localcluster.Manager
	port int // its webhook's port; 0 when it runs without the webhook
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := localcluster.FreePort()
	require.NoError(t, err)
	return p
}

// startReplica starts a manager with the webhook on port (0: without the
// webhook) and waits until it is ready. It is stopped when the test ends.
func startReplica(t *testing.T, name string, port int, extra ...string) *replica {
	t.Helper()
	r, err := launch(t, name, port, nil, extra...)
	require.NoError(t, err)
	return r
}

// launch starts a manager as startReplica does, with env added to its
// environment, and returns an error rather than failing the test, so that
// a goroutine may call it.
func launch(t *testing.T, name string, port int, env []string, extra ...string) (*replica, error) {
	args := append([]string{"-v=1"}, leaseFlags...)
	if port == 0 {
		args = append(args, "--webhook=false")
	} else {
		args = append(args, localcluster.WebhookFlags(port)...)
	}
	m, err := testutil.RunManager(t, cluster, cluster.ManagerBin, name, testutil.ManagerOptions{Env: env, Ready: true}, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	return &replica{Manager: m, port: port}, nil
}

// readyz returns the replica's /readyz status and body.
func (r *replica) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", r.HealthPort))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// served is the certificate the replica's webhook serves, checked against
// the CA bundle caPEM and the name the API server would use.
func (r *replica) served(t *testing.T, caPEM []byte) (*x509.Certificate, error) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA in %q", caPEM)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", r.port),
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// metric reads one of the replica's metrics.
func (r *replica) metric(t *testing.T, family string, match ...string) float64 {
	t.Helper()
	v, err := r.Metric(context.Background(), family, match...)
	require.NoError(t, err)
	return v
}

// sameCert reports whether the PEM certificate pemCert is c.
func sameCert(t *testing.T, pemCert string, c *x509.Certificate) bool {
	t.Helper()
	certs, err := cert.ParseCertsPEM([]byte(pemCert))
	require.NoError(t, err)
	return certs[0].Equal(c)
}

// poster sends AdmissionReviews straight to a webhook port, as any client
// that reaches it can: without the API server and without credentials.
type poster struct {
	url    string
	client *http.Client
}

func newPoster(t *testing.T, port int) *poster {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(getSecret(t).Data["ca.crt"]))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &poster{url: fmt.Sprintf("https://127.0.0.1:%d", port), client: &http.Client{Transport: tr}}
}

// review is an AdmissionReview of op on node name by user: obj and old are
// AcceleratorQuotas as JSON ("" for none).
func review(op, name, user, obj, old string) []byte {
	field := func(k, v string) string {
		if v == "" {
			return ""
		}
		return fmt.Sprintf(`,%q:%s`, k, v)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,`+
		`"kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"resource":{"group":"ome.io","version":"v1beta1","resource":"acceleratorquotas"},`+
		`"name":%q,"operation":%q,"userInfo":{"username":%q}%s%s}}`,
		string(uuid.NewUUID()), name, op, user, field("object", obj), field("oldObject", old)))
}

// post sends body to path with a client timeout; it returns the HTTP
// status and the body, or the error.
func (p *poster) post(ctx context.Context, path string, body []byte, timeout time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// aqJSON is an AcceleratorQuota as the API server sends it in a review.
func aqJSON(name, uid, rv, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"ome.io/v1beta1","kind":"AcceleratorQuota","metadata":{"name":%q,"uid":%q,"resourceVersion":%q},"spec":%s}`, name, uid, rv, spec)
}

// reservationsOf are the reservations of node in the admission ledger as
// the API server stores it now.
func reservationsOf(t *testing.T, node string) []v1beta1.Reservation {
	t.Helper()
	cs, err := versioned.NewForConfig(cluster.Config)
	require.NoError(t, err)
	led, err := cs.OmeV1beta1().AdmissionLedgers().Get(context.Background(), "ome-quota-manager", metav1.GetOptions{})
	require.NoError(t, err)
	var out []v1beta1.Reservation
	for _, r := range led.Spec.Reservations {
		if r.Node == node {
			out = append(out, r)
		}
	}
	return out
}
