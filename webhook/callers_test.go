package webhook

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

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// testCA is a CA that signs certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert, key}
}

// issue signs a certificate for cn with extended key usage eku.
func (ca *testCA) issue(t *testing.T, cn string, eku x509.ExtKeyUsage) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: []string{"kubeadm:cluster-admins"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{eku},
		KeyUsage: x509.KeyUsageDigitalSignature}, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func (ca *testCA) file(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCallersVerify: with a client CA and names, only a client
// certificate the CA signed for client use, with one of the names, is
// served; without the CA read yet, none is, and the replica is not ready.
func TestCallersVerify(t *testing.T) {
	cluster, other := newTestCA(t, "kubernetes"), newTestCA(t, "someone-else")
	o := DefaultOptions()
	o.ClientCA, o.ClientNames = cluster.file(t), []string{"kube-apiserver-kubelet-client"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	c := newCallers(&o.CertOptions)
	for name, tc := range map[string]struct {
		chain [][]byte
		want  string // "" admits
	}{
		"the API server's":            {[][]byte{cluster.issue(t, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth)}, ""},
		"a kubelet's, by the same CA": {[][]byte{cluster.issue(t, "system:node:n1", x509.ExtKeyUsageClientAuth)}, `names "system:node:n1", not a caller this webhook serves`},
		"another CA's":                {[][]byte{other.issue(t, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth)}, "certificate signed by unknown authority"},
		"a serving certificate":       {[][]byte{cluster.issue(t, "kube-apiserver-kubelet-client", x509.ExtKeyUsageServerAuth)}, "incompatible key usage"},
		"none":                        {nil, "no client certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.verify(tc.chain, nil)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("verify: %v, want %q", err, tc.want)
			}
		})
	}
	if !strings.HasPrefix(c.describe(9443), "authenticated: only clients with a certificate that the CA in ") {
		t.Errorf("describe: %s", c.describe(9443))
	}

	o = DefaultOptions()
	o.ClientCAConfigMap = "kube-system/extension-apiserver-authentication:client-ca-file"
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	c = newCallers(&o.CertOptions)
	if err := c.verify([][]byte{cluster.issue(t, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth)}, nil); err == nil || !strings.Contains(err.Error(), "has not read the CA") {
		t.Errorf("before the ConfigMap is read: %v, want a refusal", err)
	}
	if err := c.ready(); err == nil || !strings.Contains(err.Error(), "kube-system/extension-apiserver-authentication, key client-ca-file") {
		t.Errorf("ready before the ConfigMap is read: %v", err)
	}
	if d := newCallers(&DefaultOptions().CertOptions).describe(9443); !strings.HasPrefix(d, "not authenticated: any client that reaches port 9443 is served") {
		t.Errorf("describe without a CA: %s", d)
	}
}

// TestCheckPolicy: the API server's addresses that no source of the
// webhook port's rule admits, by where the policy's sources came from.
func TestCheckPolicy(t *testing.T) {
	port := func(p int) []networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(int32(p))
		return []networkingv1.NetworkPolicyPort{{Port: &v}}
	}
	block := func(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
	}
	policy := func(sources string, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
		p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if sources != "" {
			p.Annotations[SourcesAnnotation] = sources
		}
		p.Spec.Ingress = rules
		return p
	}
	metricsRule := networkingv1.NetworkPolicyIngressRule{Ports: port(8080)}
	for name, tc := range map[string]struct {
		policy  *networkingv1.NetworkPolicy
		addrs   []string
		outside []string
		open    bool
		says    string
	}{
		"current": {policy("lookup", metricsRule, networkingv1.NetworkPolicyIngressRule{Ports: port(9443), From: []networkingv1.NetworkPolicyPeer{block("192.0.2.10/32"), block("192.0.2.11/32")}}),
			[]string{"192.0.2.10", "192.0.2.11"}, nil, false, "current: every API server address"},
		"stale": {policy("lookup", metricsRule, networkingv1.NetworkPolicyIngressRule{Ports: port(9443), From: []networkingv1.NetworkPolicyPeer{block("192.0.2.10/32")}}),
			[]string{"192.0.2.10", "192.0.2.12"}, []string{"192.0.2.12"}, false, "stale: the API server at 192.0.2.12 is not among the webhook port's sources (192.0.2.10/32)"},
		"a proxy in the values": {policy("", networkingv1.NetworkPolicyIngressRule{Ports: port(9443), From: []networkingv1.NetworkPolicyPeer{block("10.0.0.0/24")}}),
			[]string{"192.0.2.10"}, []string{"192.0.2.10"}, false, "not among quotaManager.networkPolicy.apiServerCIDRs (10.0.0.0/24)"},
		"a block with an exception": {policy("values", networkingv1.NetworkPolicyIngressRule{Ports: port(9443), From: []networkingv1.NetworkPolicyPeer{block("192.0.2.0/24", "192.0.2.12/32")}}),
			[]string{"192.0.2.10", "192.0.2.12"}, []string{"192.0.2.12"}, false, "192.0.2.12"},
		"IPv6": {policy("lookup", networkingv1.NetworkPolicyIngressRule{Ports: port(9443), From: []networkingv1.NetworkPolicyPeer{block("2001:db8::20/128")}}),
			[]string{"2001:db8::20"}, nil, false, "current"},
		"only another port's rule names it": {policy("lookup", networkingv1.NetworkPolicyIngressRule{Ports: port(8080), From: []networkingv1.NetworkPolicyPeer{block("192.0.2.10/32")}}),
			[]string{"192.0.2.10"}, []string{"192.0.2.10"}, false, "stale"},
		"open": {policy("lookup", networkingv1.NetworkPolicyIngressRule{Ports: port(9443)}), []string{"192.0.2.10"}, nil, true, "open: a rule of the NetworkPolicy admits every source"},
	} {
		t.Run(name, func(t *testing.T) {
			c := CheckPolicy(tc.policy, 9443, tc.addrs)
			if c.Open != tc.open || strings.Join(c.Outside, ",") != strings.Join(tc.outside, ",") || !strings.Contains(c.String(), tc.says) {
				t.Errorf("got open %v, outside %v, %q; want open %v, outside %v, saying %q", c.Open, c.Outside, c, tc.open, tc.outside, tc.says)
			}
		})
	}
}
