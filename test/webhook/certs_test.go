package webhook

import (
	"context"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/webhook"
)

// keeperSetup creates an empty Secret and a ValidatingWebhookConfiguration
// of their own (the webhook in it is never called: its rules match nothing
// that is written) and returns options for certificate keepers on them.
func keeperSetup(t *testing.T, name string, caLife, servingLife time.Duration) *webhook.Options {
	t.Helper()
	ctx := context.Background()
	_, err := cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedLabels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cluster.Kube.CoreV1().Secrets(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	url, none, ignore := "https://127.0.0.1:1/never", admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore
	hook := func(n string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name: n, AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &ignore,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"things"}}}},
		}
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name + ".example.com", Labels: managedLabels},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{hook("one.example.com"), hook("two.example.com")}}
	_, err = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	o := webhook.DefaultOptions()
	o.CertSecret, o.ConfigName, o.CertHosts = ns+"/"+name, cfg.Name, []string{"127.0.0.1"}
	o.CALifetime, o.ServingLifetime, o.CheckInterval = caLife, servingLife, 200*time.Millisecond
	require.NoError(t, o.Validate())
	return o
}

func runKeeper(t *testing.T, o *webhook.Options) *webhook.Certs {
	t.Helper()
	c := webhook.NewCerts(cluster.Kube, o)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return c
}

// secretCerts reads the keeper's Secret: the CAs of ca.crt and the leaf.
func secretCerts(t *testing.T, o *webhook.Options) ([]*x509.Certificate, *x509.Certificate) {
	t.Helper()
	name := o.CertSecret[strings.Index(o.CertSecret, "/")+1:]
	s, err := cluster.Kube.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	if len(s.Data["ca.crt"]) == 0 {
		return nil, nil
	}
	cas, err := cert.ParseCertsPEM(s.Data["ca.crt"])
	require.NoError(t, err)
	leaf, err := cert.ParseCertsPEM(s.Data["tls.crt"])
	require.NoError(t, err)
	return cas, leaf[0]
}

func configBundles(t *testing.T, o *webhook.Options) []string {
	t.Helper()
	cfg, err := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), o.ConfigName, metav1.GetOptions{})
	require.NoError(t, err)
	var out []string
	for _, w := range cfg.Webhooks {
		out = append(out, string(w.ClientConfig.CABundle))
	}
	return out
}

func waitReady(t *testing.T, cs ...*webhook.Certs) {
	t.Helper()
	eventually(t, 15*time.Second, func() string {
		for _, c := range cs {
			if err := c.Ready(); err != nil {
				return err.Error()
			}
		}
		return ""
	})
}

// TestCertificateRotation runs two keepers on one Secret with lifetimes of
// seconds: they agree on one certificate, renew the serving certificate
// under the same CA once two thirds of its life are gone, then rotate the
// CA, publishing the new CA beside the old one.
func TestCertificateRotation(t *testing.T) {
	o := keeperSetup(t, "rotation-cert", 24*time.Second, 6*time.Second)
	k1, k2 := runKeeper(t, o), runKeeper(t, o)
	waitReady(t, k1, k2)

	agree := func() string {
		_, leaf := secretCerts(t, o)
		if leaf == nil || !k1.Leaf().Equal(leaf) || !k2.Leaf().Equal(leaf) {
			return "the keepers do not both serve the Secret's certificate"
		}
		for _, b := range configBundles(t, o) {
			if b != string(k1.CABundle()) {
				return "a webhook lacks the CA bundle"
			}
		}
		return ""
	}
	eventually(t, 10*time.Second, agree)
	cas, first := secretCerts(t, o)
	require.Len(t, cas, 1)
	require.Equal(t, []string{"ome-quota-manager-webhook.ome.svc", "ome-quota-manager-webhook", "ome-quota-manager-webhook.ome",
		"ome-quota-manager-webhook.ome.svc.cluster.local"}, first.DNSNames)
	require.Len(t, first.IPAddresses, 1)
	require.True(t, first.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")))

	// The serving certificate is renewed under the same CA.
	eventually(t, 20*time.Second, func() string {
		cas2, leaf := secretCerts(t, o)
		if leaf.Equal(first) {
			return "not renewed yet"
		}
		if len(cas2) != 1 || !cas2[0].Equal(cas[0]) {
			return "the CA changed with the serving certificate"
		}
		return agree()
	})

	// Later the CA itself is rotated, and the old one stays beside it.
	eventually(t, 30*time.Second, func() string {
		cas3, _ := secretCerts(t, o)
		if len(cas3) != 2 || cas3[0].Equal(cas[0]) || !cas3[1].Equal(cas[0]) {
			return "the CA is not rotated yet"
		}
		return agree()
	})
	waitReady(t, k1, k2)
}

// TestCertificateReload replaces the Secret's content with a certificate
// from elsewhere (served at once, without a restart), resets the CA bundle
// (put back), and deletes the Secret (no certificate, not ready) and
// recreates it empty (filled again).
func TestCertificateReload(t *testing.T) {
	o := keeperSetup(t, "reload-cert", time.Hour, time.Hour)
	k := runKeeper(t, o)
	waitReady(t, k)
	ctx := context.Background()
	name := "reload-cert"

	// A certificate brought by someone else, without its CA's key.
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKeyWithOptions(cert.SelfSignedCertKeyOptions{
		Host: "ome-quota-manager-webhook.ome.svc", AlternateIPs: []net.IP{net.ParseIP("127.0.0.1")},
		AlternateDNS: []string{"ome-quota-manager-webhook", "ome-quota-manager-webhook.ome", "ome-quota-manager-webhook.ome.svc.cluster.local"},
		MaxAge:       3 * time.Hour, // from an hour ago
	})
	require.NoError(t, err)
	chain, err := cert.ParseCertsPEM(certPEM)
	require.NoError(t, err)
	require.Len(t, chain, 2)
	caPEM, err := cert.EncodeCertificates(chain[1])
	require.NoError(t, err)
	leafPEM, err := cert.EncodeCertificates(chain[0])
	require.NoError(t, err)
	s, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	s.Data = map[string][]byte{"ca.crt": caPEM, "tls.crt": leafPEM, "tls.key": keyPEM}
	_, err = cluster.Kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() string {
		if !k.Leaf().Equal(chain[0]) {
			return "the new certificate is not served"
		}
		for _, b := range configBundles(t, o) {
			if b != string(caPEM) {
				return "the new CA is not injected"
			}
		}
		return ""
	})
	waitReady(t, k)

	// Someone resets the CA bundle: it is put back.
	cfg, err := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, o.ConfigName, metav1.GetOptions{})
	require.NoError(t, err)
	cfg.Webhooks[1].ClientConfig.CABundle = nil
	_, err = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() string {
		if b := configBundles(t, o); b[1] != string(caPEM) {
			return "the CA bundle is not back"
		}
		return ""
	})

	// The configuration deleted (the webhook disabled) and created again
	// without a CA bundle (enabled again): the bundle is injected.
	require.NoError(t, cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, o.ConfigName, metav1.DeleteOptions{}))
	eventually(t, 10*time.Second, func() string {
		if err := k.Ready(); err != nil {
			return "Ready without a configuration: " + err.Error()
		}
		return ""
	})
	cfg.ResourceVersion = ""
	cfg.Webhooks[0].ClientConfig.CABundle, cfg.Webhooks[1].ClientConfig.CABundle = nil, nil
	_, err = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() string {
		if b := configBundles(t, o); b[0] != string(caPEM) || b[1] != string(caPEM) {
			return "the CA bundle is not injected into the new configuration"
		}
		return ""
	})

	// The Secret deleted: nothing to serve, not ready, and it is not
	// created again.
	require.NoError(t, cluster.Kube.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	eventually(t, 10*time.Second, func() string {
		if err := k.Ready(); err == nil || !strings.Contains(err.Error(), "Secret ome/reload-cert does not exist") {
			return "Ready: " + errString(err)
		}
		return ""
	})
	require.Nil(t, k.Leaf())
	_, err = k.GetCertificate(nil)
	require.Error(t, err)
	// Ready above shows that the keeper has handled the deletion; it
	// has no way to create a Secret, so none exists after it.
	_, err = cluster.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	require.True(t, err != nil && strings.Contains(err.Error(), "not found"), "the Secret was created: %v", err)

	// Recreated empty: filled, injected, ready.
	_, err = cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedLabels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitReady(t, k)
	cas, leaf := secretCerts(t, o)
	require.True(t, k.Leaf().Equal(leaf))
	require.False(t, cas[0].Equal(chain[1]), "a new CA")
	require.Equal(t, []string{string(k.CABundle()), string(k.CABundle())}, configBundles(t, o))
}

func errString(err error) string {
	if err == nil {
		return "ready"
	}
	return err.Error()
}

// managedLabels mark objects the manager may write, as the chart's do.
var managedLabels = map[string]string{"ome.io/quota-managed-by": "ome-quota-manager"}
