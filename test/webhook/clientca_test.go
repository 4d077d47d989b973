package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/store"
	"ome.io/quota-manager/test/chart"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
	"ome.io/quota-manager/webhook"
)

// webhookClient is the folder where TestMain lays out a kubeadm control
// plane's files for this package's API server: pki/ca.crt, the cluster
// CA, and pki/apiserver-kubelet-client.crt and .key, the certificate it
// signs for the API server's client calls; and webhook-client/, which
// docs/install.md's walk-through writes. The API server presents that
// certificate to every webhook it calls.
var webhookClient string

// The walk-through's files in webhookClient.
var (
	clusterCA    = func() string { return filepath.Join(webhookClient, "pki", "ca.crt") }
	clientCert   = func() string { return filepath.Join(webhookClient, "pki", "apiserver-kubelet-client.crt") }
	clientKey    = func() string { return filepath.Join(webhookClient, "pki", "apiserver-kubelet-client.key") }
	kubeadmBlock = regexp.MustCompile("(?ms)^```sh\n# webhook-client: ([a-z]+)\n(.*?)^```")
)

// walkThrough returns the sh blocks of docs/install.md's client
// certificate walk-through, by their mark.
func walkThrough() (map[string]string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range kubeadmBlock.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = m[2]
	}
	if out["files"] == "" || out["helm"] == "" {
		return nil, fmt.Errorf("docs/install.md has no \"# webhook-client: files\" and \"# webhook-client: helm\" blocks")
	}
	return out, nil
}

// writeWebhookClient lays out under dir what a kubeadm control plane holds
// (the cluster CA, and the API server's client certificate it signed,
// named and grouped as kubeadm does), then runs the walk-through's block
// of files as written, with /etc/kubernetes moved to dir. It returns the
// admission configuration the block wrote.
func writeWebhookClient(dir string) (string, error) {
	key := func() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }
	caKey, err := key()
	if err != nil {
		return "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	ca, _ := x509.ParseCertificate(caDER)
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return "", err
	}
	issue := func(cn, file string) error {
		k, err := key()
		if err != nil {
			return err
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()),
			Subject:   pkix.Name{CommonName: cn, Organization: []string{"kubeadm:cluster-admins"}},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			KeyUsage: x509.KeyUsageDigitalSignature}, ca, &k.PublicKey, caKey)
		if err != nil {
			return err
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pki, file+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(pki, file+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	}
	if err := os.WriteFile(filepath.Join(pki, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return "", err
	}
	// The API server's, and, for TestClientNamesRequired, a kubelet's.
	if err := issue("kube-apiserver-kubelet-client", "apiserver-kubelet-client"); err != nil {
		return "", err
	}
	if err := issue("system:node:n1", "kubelet-client"); err != nil {
		return "", err
	}
	blocks, err := walkThrough()
	if err != nil {
		return "", err
	}
	sh := exec.Command("sh", "-e")
	sh.Stdin = strings.NewReader(strings.ReplaceAll(blocks["files"], "/etc/kubernetes", dir))
	if out, err := sh.CombinedOutput(); err != nil {
		return "", fmt.Errorf("the walk-through's files block: %v: %s", err, out)
	}
	return filepath.Join(dir, "webhook-client", "admission.yaml"), nil
}

// publishClusterCA adds the cluster CA to the client CAs the API server
// publishes in kube-system/extension-apiserver-authentication: kubeadm
// starts kube-apiserver with --client-ca-file=/etc/kubernetes/pki/ca.crt,
// which puts it there, while this package's API server authenticates its
// own clients with a CA of the test harness's. The API server keeps every
// CA found there when it writes its own (client-ca-file is a bundle).
func publishClusterCA(ctx context.Context, c *localcluster.Cluster) error {
	ca, err := os.ReadFile(clusterCA())
	if err != nil {
		return err
	}
	cms := c.Kube.CoreV1().ConfigMaps("kube-system")
	err = testutil.Poll(time.Minute, time.Second, func() error {
		cm, err := cms.Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if bytes.Contains([]byte(cm.Data["client-ca-file"]), bytes.TrimSpace(ca)) {
			return nil
		}
		cm.Data["client-ca-file"] = strings.TrimRight(cm.Data["client-ca-file"], "\n") + "\n" + string(ca)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return fmt.Errorf("written, not yet read back")
	})
	if err != nil {
		return fmt.Errorf("publishing the cluster CA in kube-system/extension-apiserver-authentication: %w", err)
	}
	return nil
}

// withClientCert is a poster that presents the certificate of file (under
// pki/) as its client certificate.
func withClientCert(t *testing.T, port int, file string) *poster {
	t.Helper()
	p := newPoster(t, port)
	pair, err := tls.LoadX509KeyPair(filepath.Join(webhookClient, "pki", file+".crt"), filepath.Join(webhookClient, "pki", file+".key"))
	require.NoError(t, err)
	p.client.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{pair}
	return p
}

// TestClientCertificateRequired: with --webhook-client-ca, the API server,
// which presents a certificate that CA signed, still gets its writes
// judged, and a client without one cannot even finish the TLS handshake.
// The verdicts on its writes are authenticated, kept in their own log,
// and carry the record the stored object carries (the API server sets
// managedFields before it calls the webhook), so the trail names their
// user as the author of each write.
func TestClientCertificateRequired(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	logDir := t.TempDir()
	r := startReplica(t, "clientca", port, "--webhook-client-ca="+clusterCA(), "--event-log="+logDir)
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "clientca") })
	_, err = aqs.Create(ctx, aqtest.Cohort("clientca", "root").Budget(gpu, "a100", "4").Obj(), metav1.CreateOptions{})
	require.NoError(t, err, "a write through the API server, which presents its certificate")
	_, err = aqs.Create(ctx, aqtest.Team("clientca-big", "clientca").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
	require.ErrorContains(t, err, "is 4 but its children total 8", "the webhook did not judge the API server's write")
	_, err = aqs.Patch(ctx, "clientca", types.MergePatchType,
		[]byte(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"6"}]}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	stored, err := aqs.Get(ctx, "clientca", metav1.GetOptions{})
	require.NoError(t, err)
	// The replica's log holds the update once its informer has seen it
	// (the log is written at least once a second).
	require.Eventually(t, func() bool { return logged(t, logDir, "clientca", stored.ResourceVersion) }, 20*time.Second, 200*time.Millisecond,
		"the replica's log never held the update")

	body := review("DELETE", "clientca", "mallory", "", aqJSON("clientca", "u", "1", `{"role":"Cohort","parentRef":{"name":"root"}}`))
	_, _, err = newPoster(t, port).post(ctx, webhook.Path, body, 5*time.Second)
	require.Error(t, err, "a client without a certificate was served")
	t.Logf("without a certificate: %v", err)

	code, _, err := withClientCert(t, port, "apiserver-kubelet-client").post(ctx, webhook.Path, body, 5*time.Second)
	require.NoError(t, err, "a client with the certificate")
	require.Equal(t, http.StatusOK, code)

	// The trail: stop the replica so that its logs are whole.
	r.Stop()
	_, err = os.Stat(filepath.Join(logDir, store.VerdictsDir))
	require.NoError(t, err)
	var records []string
	_, err = store.Read(filepath.Join(logDir, store.AuthenticatedVerdictsDir), 0, func(ev events.Event) error {
		require.True(t, ev.Verdict.Authenticated, "verdict %s", ev.Verdict.UID)
		if ev.Key == "clientca" && ev.Verdict.Allowed && ev.Verdict.Operation != "DELETE" {
			require.NotEmpty(t, ev.Verdict.Record, "the admitted %s carries no record", ev.Verdict.Operation)
			records = append(records, ev.Verdict.Record)
		}
		return nil
	})
	require.NoError(t, err)
	// A write the API server sent twice (a retried call) has two verdicts
	// with one record.
	records = slices.Compact(records)
	require.Len(t, records, 2, "the verdicts on the create and the update")
	_, err = store.Read(filepath.Join(logDir, store.VerdictsDir), 0, func(ev events.Event) error {
		t.Errorf("an unauthenticated verdict with client certificates on: %+v", ev.Verdict)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, events.RecordOf(stored.ManagedFields), records[1], "the update's verdict's record is not the stored object's")
	var first events.Event
	_, err = store.Read(logDir, 0, func(ev events.Event) error {
		if ev.Kind == events.KindAcceleratorQuota && ev.Key == "clientca" && first.Quota == nil {
			first = ev
		}
		return nil
	})
	require.NoError(t, err)
	require.NotNil(t, first.Quota)
	require.Equal(t, first.Quota.Record, records[0], "the create's verdict's record is not the one the informer saw")
	out, err := exec.Command(cluster.ManagerBin, "replay", logDir, "--node", "clientca", "--history").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("the trail:\n%s", out)
	require.Equal(t, 2, strings.Count(string(out), ", landed as #"), "the trail does not name the author of both writes")
	// A replica on the same port again, for the clean-up's deletes.
	startReplica(t, "clientca-after", port)
	deleteByPrefix(t, aqs, "clientca")
}

// logged reports whether the event log in dir holds node's version rv.
func logged(t *testing.T, dir, node, rv string) bool {
	found := false
	_, err := store.Read(dir, 0, func(ev events.Event) error {
		found = found || (ev.Kind == events.KindAcceleratorQuota && ev.Key == node && fmt.Sprint(ev.Version) == rv)
		return nil
	})
	if err != nil {
		t.Logf("reading the live log: %v", err)
	}
	return found
}

// TestClientAuthOnKubeadm follows docs/install.md's client certificate
// walk-through on this package's API server, which TestMain set up as it
// says (its files block, run with /etc/kubernetes moved, and a kubeadm
// cluster's CA and API server certificate): the replica runs with the
// flags the chart renders for the walk-through's helm block (one value,
// quotaManager.webhook.clientAuth.enabled=true), reading the CA from
// kube-system/extension-apiserver-authentication. Then the API server's
// writes are judged; a client without a certificate, and one with a
// kubelet's certificate that the same CA signed, are refused in the TLS
// handshake; and the replica says its callers are authenticated: in its
// log, its metric, and kubectl ome quota status root.
func TestClientAuthOnKubeadm(t *testing.T) {
	ctx := context.Background()
	blocks, err := walkThrough()
	require.NoError(t, err)
	var set []string
	for _, f := range strings.Fields(blocks["helm"]) {
		if strings.HasPrefix(f, "quotaManager.") {
			set = append(set, f)
		}
	}
	require.Equal(t, []string{"quotaManager.webhook.clientAuth.enabled=true"}, set, "the walk-through's helm block")
	r, err := chart.Render("ome", nil, append([]string{"quotaManager.mode=workload"}, set...)...)
	require.NoError(t, err)
	var flags []string
	for _, a := range r.Get("Deployment", "ome-quota-manager").Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["args"].([]any) {
		if s := a.(string); strings.HasPrefix(s, "--webhook-client-") {
			flags = append(flags, s)
		}
	}
	require.Equal(t, []string{"--webhook-client-ca-configmap=kube-system/extension-apiserver-authentication:client-ca-file",
		"--webhook-client-names=kube-apiserver-kubelet-client"}, flags)

	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	rep := startReplica(t, "kubeadm", port, flags...)
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "kubeadm") })
	_, err = aqs.Create(ctx, aqtest.Cohort("kubeadm", "root").Budget(gpu, "a100", "4").Obj(), metav1.CreateOptions{})
	require.NoError(t, err, "a write through the API server, which presents kubeadm's certificate")
	_, err = aqs.Create(ctx, aqtest.Team("kubeadm-big", "kubeadm").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
	require.ErrorContains(t, err, "is 4 but its children total 8", "the webhook did not judge the API server's write")

	body := review("DELETE", "kubeadm", "mallory", "", aqJSON("kubeadm", "u", "1", `{"role":"Cohort","parentRef":{"name":"root"}}`))
	_, _, err = newPoster(t, port).post(ctx, webhook.Path, body, 5*time.Second)
	require.Error(t, err, "a client without a certificate was served")
	_, _, err = withClientCert(t, port, "kubelet-client").post(ctx, webhook.Path, body, 5*time.Second)
	require.Error(t, err, "a kubelet's certificate, signed by the same CA, was served")
	code, _, err := withClientCert(t, port, "apiserver-kubelet-client").post(ctx, webhook.Path, body, 5*time.Second)
	require.NoError(t, err, "the API server's certificate")
	require.Equal(t, http.StatusOK, code)

	require.Equal(t, 1.0, rep.metric(t, "ome_quota_webhook_callers_authenticated"))
	log, err := os.ReadFile(rep.Log)
	require.NoError(t, err)
	require.Contains(t, string(log), "the webhook's callers are authenticated: only clients with a certificate that the CA in ConfigMap kube-system/extension-apiserver-authentication, key client-ca-file, signed, named kube-apiserver-kubelet-client")
	eventually(t, time.Minute, func() string {
		out := statusRoot(t)
		if !strings.Contains(out, "Callers authenticated: only clients with a certificate that the CA in ConfigMap kube-system/extension-apiserver-authentication, key client-ca-file, signed, named kube-apiserver-kubelet-client (replica kubeadm") {
			return "kubectl ome quota status root does not say the callers are authenticated:\n" + out
		}
		return ""
	})
}

// statusRoot runs kubectl ome quota status root and returns its output.
func statusRoot(t *testing.T) string {
	t.Helper()
	var out, errOut bytes.Buffer
	code := quotactl.Run([]string{"quota", "status", "root", "--kubeconfig", cluster.Kubeconfig}, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	require.Equal(t, quotactl.ExitClean, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	return out.String()
}
