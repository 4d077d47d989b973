package webhook

import (
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
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/webhook"
)

// webhookClient is where TestMain puts the certificate that the API server
// presents to every webhook it calls (its admission configuration).
var webhookClient string

// writeWebhookClient makes a CA and a client certificate under dir, and an
// admission configuration that has the API server present the certificate
// to every webhook; it returns the configuration's path.
func writeWebhookClient(dir string) (string, error) {
	key := func() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }
	caKey, err := key()
	if err != nil {
		return "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook-client-ca"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	ca, _ := x509.ParseCertificate(caDER)
	cliKey, err := key()
	if err != nil {
		return "", err
	}
	cliDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, ca, &cliKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{
		"ca.crt":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"client.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cliDER}),
		"client.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		"kubeconfig": fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: %s\n    client-key: %s\n",
			filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")),
	}
	plugin := func(name string) string {
		return fmt.Sprintf("- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s\n",
			name, filepath.Join(dir, "kubeconfig"))
	}
	files["admission.yaml"] = []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
		plugin("ValidatingAdmissionWebhook") + plugin("MutatingAdmissionWebhook"))
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "admission.yaml"), nil
}

// TestClientCertificateRequired: with --webhook-client-ca, the API server,
// which presents a certificate that CA signed, still gets its writes
// judged, and a client without one cannot even finish the TLS handshake.
func TestClientCertificateRequired(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	startReplica(t, "clientca", port, "--webhook-client-ca="+filepath.Join(webhookClient, "ca.crt"))
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "clientca") })
	_, err = aqs.Create(ctx, aqtest.Cohort("clientca", "root").Budget(gpu, "a100", "4").Obj(), metav1.CreateOptions{})
	require.NoError(t, err, "a write through the API server, which presents its certificate")
	_, err = aqs.Create(ctx, aqtest.Team("clientca-big", "clientca").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
	require.ErrorContains(t, err, "is 4 but its children total 8", "the webhook did not judge the API server's write")

	body := review("DELETE", "clientca", "mallory", "", aqJSON("clientca", "u", "1", `{"role":"Cohort","parentRef":{"name":"root"}}`))
	_, _, err = newPoster(t, port).post(ctx, webhook.Path, body, 5*time.Second)
	require.Error(t, err, "a client without a certificate was served")
	t.Logf("without a certificate: %v", err)

	p := newPoster(t, port)
	pair, err := tls.LoadX509KeyPair(filepath.Join(webhookClient, "client.crt"), filepath.Join(webhookClient, "client.key"))
	require.NoError(t, err)
	p.client.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{pair}
	code, _, err := p.post(ctx, webhook.Path, body, 5*time.Second)
	require.NoError(t, err, "a client with the certificate")
	require.Equal(t, http.StatusOK, code)
}
