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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/webhook"
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
		require.Empty(t, cmp.Diff(want, got.Object), "the chart's AdmissionLedger CRD is not config/crd's: run make generate (-config +chart)")
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

// Two API servers as the (deprecated) Endpoints list them, one of them on
// IPv6; APIServerSlice lists two others.
var (
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
	apiServers   = Cluster{sliceKey: APIServerSlice, endpointsKey: apiServerEndpoints}
)

// TestNetworkPolicy: on by default; the webhook port admits only the API
// server (the values' CIDRs, else the kubernetes EndpointSlice's or
// Endpoints' addresses, which the policy notes as looked up, for the
// manager to compare with the API server's addresses later); where
// neither is known (helm template, Argo CD) the chart refuses to render,
// saying what to set. The metrics port admits the monitoring namespace
// and the release's; the health port stays open to the kubelet's probes.
func TestNetworkPolicy(t *testing.T) {
	check := func(t *testing.T, np *networkingv1.NetworkPolicy, sources string) map[int32]networkingv1.NetworkPolicyIngressRule {
		t.Helper()
		require.Equal(t, map[string]string{"app.kubernetes.io/name": "ome-quota-manager", "app.kubernetes.io/instance": "ome-quota-manager"},
			np.Spec.PodSelector.MatchLabels)
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
		require.Equal(t, sources, np.Annotations[webhook.SourcesAnnotation])
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
	const refusal = "quotaManager.networkPolicy.apiServerCIDRs is empty, and the API server's addresses cannot be looked up here (helm template, Argo CD and client-side dry runs read no cluster): the NetworkPolicy would admit every source to the webhook port, so the chart does not render it. Set quotaManager.networkPolicy.apiServerCIDRs to where your API server calls webhooks from (docs/install.md, The NetworkPolicy, lists the usual ones for GKE, EKS, AKS and kubeadm), or turn the policy off on purpose with quotaManager.networkPolicy.enabled=false"

	t.Run("helm template with the defaults: refused, saying what to set", func(t *testing.T) {
		_, err := Template("ome", install)
		require.Error(t, err)
		require.Contains(t, err.Error(), refusal)
	})
	t.Run("helm template with apiServerCIDRs: exactly those", func(t *testing.T) {
		r, err := Template("ome", install, "quotaManager.networkPolicy.apiServerCIDRs={10.0.0.0/24,10.1.0.0/24}")
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r), "values")
		require.Len(t, rules, 3)
		require.Equal(t, []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}, {IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/24"}},
		}, rules[9443].From, "the webhook port's sources are exactly the values'")
		require.Contains(t, deployment(t, r).Spec.Template.Spec.Containers[0].Args, "--webhook-network-policy=ome/ome-quota-manager")
	})
	t.Run("helm template with the policy off on purpose", func(t *testing.T) {
		r, err := Template("ome", install, "quotaManager.networkPolicy.enabled=false")
		require.NoError(t, err)
		require.Nil(t, r.Get("NetworkPolicy", "ome-quota-manager"))
		for _, a := range deployment(t, r).Spec.Template.Spec.Containers[0].Args {
			require.False(t, strings.HasPrefix(a, "--webhook-network-policy"), a)
		}
	})
	t.Run("install: the kubernetes EndpointSlice's addresses, looked up", func(t *testing.T) {
		r, err := RenderIn(apiServers, "ome", install)
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r), "lookup")
		require.Equal(t, []string{"192.0.2.10/32", "192.0.2.11/32"}, cidrs(rules[9443]))
		require.Len(t, rules[9443].From, 2, "only the API servers: no replica calls another")
	})
	t.Run("install, no EndpointSlice: the kubernetes Endpoints' addresses", func(t *testing.T) {
		r, err := RenderIn(Cluster{endpointsKey: apiServerEndpoints}, "ome", install)
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r), "lookup")
		require.Equal(t, []string{"192.0.2.20/32", "2001:db8::20/128"}, cidrs(rules[9443]))
		require.Len(t, rules[9443].From, 2)
	})
	t.Run("apiServerCIDRs win over the Endpoints", func(t *testing.T) {
		r, err := RenderIn(apiServers, "ome", install, "quotaManager.networkPolicy.apiServerCIDRs={10.0.0.0/24,10.1.0.0/24}")
		require.NoError(t, err)
		rules := check(t, networkPolicy(t, r), "values")
		require.Equal(t, []string{"10.0.0.0/24", "10.1.0.0/24"}, cidrs(rules[9443]))
		require.Len(t, rules[9443].From, 2)
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
	t.Run("webhook off: no webhook port, nothing to look up", func(t *testing.T) {
		r, err := Template("ome", webhookDisabled)
		require.NoError(t, err)
		rules := rulePorts(t, networkPolicy(t, r))
		require.Len(t, rules, 2)
		require.NotContains(t, rules, int32(9443))
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
	t.Run("one value: the API server's client CA, kubeadm's name", func(t *testing.T) {
		r := render(t, install, "quotaManager.webhook.clientAuth.enabled=true")
		d := deployment(t, r)
		c := d.Spec.Template.Spec.Containers[0]
		require.Contains(t, c.Args, "--webhook-client-ca-configmap=kube-system/extension-apiserver-authentication:client-ca-file")
		require.Contains(t, c.Args, "--webhook-client-names=kube-apiserver-kubelet-client")
		for _, v := range d.Spec.Template.Spec.Volumes {
			require.NotEqual(t, "webhook-client-ca", v.Name, "nothing is mounted: the CA is read through the API")
		}
		rb := convert[rbacv1.RoleBinding](t, r.Get("RoleBinding", "ome-quota-manager-client-ca"))
		require.Equal(t, "kube-system", rb.Namespace)
		require.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "extension-apiserver-authentication-reader"}, rb.RoleRef)
		require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ome-quota-manager", Namespace: "ome"}}, rb.Subjects)
		_, w := flags(t, c.Args)
		require.Equal(t, "kube-system/extension-apiserver-authentication:client-ca-file", w.ClientCAConfigMap)
		require.Equal(t, []string{"kube-apiserver-kubelet-client"}, w.ClientNames)
		require.NotContains(t, r.Notes, "callers are not authenticated")
	})
	t.Run("off: the release notes say so", func(t *testing.T) {
		r := render(t, install)
		require.Contains(t, r.Notes, "The webhook's callers are not authenticated")
		require.Nil(t, r.Get("RoleBinding", "ome-quota-manager-client-ca"))
	})
	t.Run("a CA of your own with clientAuth: its Secret, with the names", func(t *testing.T) {
		r := render(t, install, "quotaManager.webhook.clientAuth.enabled=true", "quotaManager.webhook.clientCA.secretName=apiserver-webhook-client-ca",
			"quotaManager.webhook.clientAuth.names={kube-apiserver}")
		c := deployment(t, r).Spec.Template.Spec.Containers[0]
		require.Contains(t, c.Args, "--webhook-client-ca=/etc/ome-quota-manager/webhook-client-ca/ca.crt")
		require.Contains(t, c.Args, "--webhook-client-names=kube-apiserver")
		for _, a := range c.Args {
			require.False(t, strings.HasPrefix(a, "--webhook-client-ca-configmap"), a)
		}
		require.Nil(t, r.Get("RoleBinding", "ome-quota-manager-client-ca"))
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
