package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/test/localcluster"
)

// TestLedgerCRD: the AdmissionLedger's CRD is rendered whoever installs the
// AcceleratorQuota CRD (the guide leaves that to ome-crd with crd.install
// false), and with the webhook off too, so that turning it off does not
// delete the CRD and the ledger with it. It is config/crd's.
func TestLedgerCRD(t *testing.T) {
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "ome.io_admissionledgers.yaml"))
	require.NoError(t, err)
	var want map[string]any
	require.NoError(t, yaml.Unmarshal(data, &want))
	for _, set := range [][]string{
		{"quotaManager.crd.install=false"},
		{"quotaManager.crd.install=true"},
		{"quotaManager.webhook.enabled=false"},
	} {
		r := render(t, install, set...)
		got := r.Get("CustomResourceDefinition", "admissionledgers.ome.io")
		require.NotNil(t, got, "the ledger's CRD with %s", set)
		if diff := cmp.Diff(want, got.Object); diff != "" {
			t.Fatalf("the chart's AdmissionLedger CRD is not config/crd's: run make generate (-config +chart):\n%s", diff)
		}
		aq := r.Get("CustomResourceDefinition", "acceleratorquotas.ome.io")
		require.Equal(t, set[0] == "quotaManager.crd.install=true", aq != nil, "the AcceleratorQuota CRD with %s", set)
	}
}

func networkPolicy(t *testing.T, r *Rendered) *networkingv1.NetworkPolicy {
	return convert[networkingv1.NetworkPolicy](t, r.Get("NetworkPolicy", "ome-quota-manager"))
}

// rulePorts returns the ingress rules by the one port each admits.
func rulePorts(t *testing.T, np *networkingv1.NetworkPolicy) map[int32]networkingv1.NetworkPolicyIngressRule {
	t.Helper()
	out := map[int32]networkingv1.NetworkPolicyIngressRule{}
	for _, r := range np.Spec.Ingress {
		require.Len(t, r.Ports, 1)
		require.Equal(t, corev1.ProtocolTCP, *r.Ports[0].Protocol)
		out[r.Ports[0].Port.IntVal] = r
	}
	return out
}

func cidrs(r networkingv1.NetworkPolicyIngressRule) []string {
	var out []string
	for _, p := range r.From {
		if p.IPBlock != nil {
			out = append(out, p.IPBlock.CIDR)
		}
	}
	return out
}

// Two API servers as the kubernetes EndpointSlice lists them, and two,
// one of them on IPv6, as the (deprecated) Endpoints do.
var (
	apiServerSlice = map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
		"metadata": map[string]any{"name": "kubernetes", "namespace": "default"},
		"endpoints": []any{
			map[string]any{"addresses": []any{"192.0.2.10"}, "conditions": map[string]any{"ready": true}},
			map[string]any{"addresses": []any{"192.0.2.11"}, "conditions": map[string]any{"ready": true}},
		},
	}
	apiServerEndpoints = map[string]any{
		"apiVersion": "v1", "kind": "Endpoints",
		"metadata": map[string]any{"name": "kubernetes", "namespace": "default"},
		"subsets": []any{map[string]any{
			"addresses": []any{map[string]any{"ip": "192.0.2.20"}, map[string]any{"ip": "2001:db8::20"}},
			"ports":     []any{map[string]any{"name": "https", "port": int64(6443), "protocol": "TCP"}},
		}},
	}
	sliceKey     = "discovery.k8s.io/v1 EndpointSlice default kubernetes"
	endpointsKey = "v1 Endpoints default kubernetes"
	apiServers   = Cluster{sliceKey: apiServerSlice, endpointsKey: apiServerEndpoints}
)

// TestNetworkPolicy: on by default; the webhook port admits only the API
// server (the values' CIDRs, else the kubernetes Endpoints' addresses),
// and every source only when neither is known, which the policy and the
// release notes say; the metrics port admits the monitoring namespace and
// the release's; the health port stays open to the kubelet's probes.
func TestNetworkPolicy(t *testing.T) {
	const fallback = "FALLBACK: no address of the API server is known"
	const notes = "WARNING: the NetworkPolicy ome-quota-manager admits every source on the webhook\nport"
	check := func(t *testing.T, np *networkingv1.NetworkPolicy) map[int32]networkingv1.NetworkPolicyIngressRule {
		t.Helper()
		require.Equal(t, map[string]string{"app.kubernetes.io/name": "ome-quota-manager", "app.kubernetes.io/instance": "ome-quota-manager"},
			np.Spec.PodSelector.MatchLabels)
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
		rules := rulePorts(t, np)
		metrics := rules[8080]
		require.Equal(t, []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}},
			{PodSelector: &metav1.LabelSelector{}}, // every pod of the release's namespace
		}, metrics.From)
		health, ok := rules[8081]
		require.True(t, ok, "the health port has a rule")
		require.Empty(t, health.From, "the health port admits every source")
		return rules
	}

	t.Run("default, nothing to look up: every source, said twice", func(t *testing.T) {
		r := render(t, install)
		rules := check(t, networkPolicy(t, r))
		require.Len(t, rules, 3)
		require.Empty(t, rules[9443].From)
		require.Contains(t, r.Manifest, fallback)
		require.Contains(t, r.Notes, notes)
	})
	t.Run("default, the kubernetes EndpointSlice's addresses", func(t *testing.T) {
		r, err := RenderIn(apiServers, "ome", install)
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r))
		require.Equal(t, []string{"192.0.2.10/32", "192.0.2.11/32"}, cidrs(rules[9443]))
		require.Len(t, rules[9443].From, 2, "only the API servers: no replica calls another")
		require.NotContains(t, r.Manifest, fallback)
		require.NotContains(t, r.Notes, "admits every source")
	})
	t.Run("default, no EndpointSlice: the kubernetes Endpoints' addresses", func(t *testing.T) {
		r, err := RenderIn(Cluster{endpointsKey: apiServerEndpoints}, "ome", install)
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r))
		require.Equal(t, []string{"192.0.2.20/32", "2001:db8::20/128"}, cidrs(rules[9443]))
		require.Len(t, rules[9443].From, 2)
		require.NotContains(t, r.Notes, "admits every source")
	})
	t.Run("apiServerCIDRs win over the Endpoints", func(t *testing.T) {
		r, err := RenderIn(apiServers, "ome", install, "quotaManager.networkPolicy.apiServerCIDRs={10.0.0.0/24,10.1.0.0/24}")
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r))
		require.Equal(t, []string{"10.0.0.0/24", "10.1.0.0/24"}, cidrs(rules[9443]))
		require.Len(t, rules[9443].From, 2)
		require.NotContains(t, r.Notes, "admits every source")
	})
	t.Run("ports follow the values", func(t *testing.T) {
		r := render(t, install, "quotaManager.webhook.port=10443", "quotaManager.metrics.port=9090",
			"quotaManager.healthPort=9091", "quotaManager.networkPolicy.monitoringNamespace=observability")
		rules := rulePorts(t, networkPolicy(t, r))
		require.Len(t, rules, 3)
		require.Contains(t, rules, int32(10443))
		require.Contains(t, rules, int32(9091))
		require.Equal(t, "observability", rules[9090].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
	})
	t.Run("webhook off: no webhook port, no warning", func(t *testing.T) {
		r := render(t, webhookDisabled)
		rules := rulePorts(t, networkPolicy(t, r))
		require.Len(t, rules, 2)
		require.NotContains(t, rules, int32(9443))
		require.NotContains(t, r.Notes, "admits every source")
	})
	t.Run("off", func(t *testing.T) {
		r := render(t, install, "quotaManager.networkPolicy.enabled=false")
		require.Nil(t, r.Get("NetworkPolicy", "ome-quota-manager"))
		require.NotContains(t, r.Notes, "admits every source")
	})
}

// TestClientCA: off by default; a Secret named in webhook.clientCA is
// mounted read-only and its key passed as --webhook-client-ca, which the
// binary's flag set accepts.
func TestClientCA(t *testing.T) {
	for _, a := range deployment(t, render(t, install)).Spec.Template.Spec.Containers[0].Args {
		require.False(t, strings.HasPrefix(a, "--webhook-client-ca"), "off by default: %s", a)
	}

	for name, tc := range map[string]struct {
		set  []string
		path string
	}{
		"default key": {[]string{"quotaManager.webhook.clientCA.secretName=apiserver-webhook-client-ca"}, "ca.crt"},
		"own key": {[]string{"quotaManager.webhook.clientCA.secretName=apiserver-webhook-client-ca",
			"quotaManager.webhook.clientCA.key=client-ca.pem"}, "client-ca.pem"},
	} {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, render(t, install, tc.set...))
			pod := d.Spec.Template.Spec
			c := pod.Containers[0]
			flag := "--webhook-client-ca=/etc/ome-quota-manager/webhook-client-ca/" + tc.path
			require.Contains(t, c.Args, flag)
			var mount *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "webhook-client-ca" {
					mount = &c.VolumeMounts[i]
				}
			}
			require.NotNil(t, mount)
			require.Equal(t, "/etc/ome-quota-manager/webhook-client-ca", mount.MountPath)
			require.True(t, mount.ReadOnly)
			var vol *corev1.Volume
			for i := range pod.Volumes {
				if pod.Volumes[i].Name == "webhook-client-ca" {
					vol = &pod.Volumes[i]
				}
			}
			require.NotNil(t, vol)
			require.NotNil(t, vol.Secret)
			require.Equal(t, "apiserver-webhook-client-ca", vol.Secret.SecretName)

			// The binary reads the file: give it one at that path's name.
			ca := writeCA(t)
			args := append([]string{}, c.Args...)
			for i, a := range args {
				if a == flag {
					args[i] = "--webhook-client-ca=" + ca
				}
			}
			_, w := flags(t, args)
			require.Equal(t, ca, w.ClientCA)
		})
	}

	t.Run("webhook off: nothing mounted", func(t *testing.T) {
		d := deployment(t, render(t, webhookDisabled, "quotaManager.webhook.clientCA.secretName=apiserver-webhook-client-ca"))
		for _, v := range d.Spec.Template.Spec.Volumes {
			require.NotEqual(t, "webhook-client-ca", v.Name)
		}
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			require.False(t, strings.HasPrefix(a, "--webhook-client-ca"), a)
		}
	})
	t.Run("the schema refuses an empty key", func(t *testing.T) {
		_, err := Render("ome", install, "quotaManager.webhook.clientCA.secretName=x", "quotaManager.webhook.clientCA.key=")
		require.Error(t, err)
		require.Contains(t, err.Error(), "/quotaManager/webhook/clientCA/key")
	})
}

// writeCA writes a self-signed CA certificate as PEM and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "apiserver-webhook-client-ca"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path
}
