package manager

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig is a member kubeconfig as the docs build it (one cluster
// with its CA embedded, one user with a token), changed by edit.
func kubeconfig(t *testing.T, edit func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	c := &clientcmdapi.Cluster{Server: "https://east.example.com:6443", CertificateAuthorityData: []byte("-----BEGIN CERTIFICATE-----\n")}
	u := &clientcmdapi.AuthInfo{Token: "t0ken"}
	if edit != nil {
		edit(c, u)
	}
	cfg.Clusters["east"] = c
	cfg.AuthInfos["plane"] = u
	cfg.Contexts["east"] = &clientcmdapi.Context{Cluster: "east", AuthInfo: "plane"}
	cfg.CurrentContext = "east"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

const where = "Secret ome/east-kubeconfig, key kubeconfig"

// TestKubeconfigRefusedFields: each field of a member's kubeconfig that
// makes the plane read a file of its own, run a command, or trust a server
// it cannot verify is refused, with a message that names the field, the
// Secret and its key, and the member, and says what to write instead.
func TestKubeconfigRefusedFields(t *testing.T) {
	prefix := "KubeconfigRefused: Secret ome/east-kubeconfig, key kubeconfig, for member east: "
	insecure := "(for a test cluster only, --members-allow-insecure-kubeconfigs (the chart's quotaManager.projection.allowInsecureKubeconfigs) accepts it)"
	cases := map[string]struct {
		edit func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)
		want string
	}{
		"tokenFile": {func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.TokenFile = "", "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}, `user "plane" sets tokenFile (/var/run/secrets/kubernetes.io/serviceaccount/token): the plane reads no file of its own for a member; put the token itself in the user's token`},
		"client-certificate": {func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificate, u.ClientKeyData = "", "/etc/plane/tls.crt", []byte("key")
		}, `user "plane" sets client-certificate (/etc/plane/tls.crt), a file path: embed the certificate as client-certificate-data (kubectl config set-credentials --embed-certs)`},
		"client-key": {func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKey = "", []byte("cert"), "/etc/plane/tls.key"
		}, `user "plane" sets client-key (/etc/plane/tls.key), a file path: embed the key as client-key-data (kubectl config set-credentials --embed-certs)`},
		"certificate-authority": {func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.CertificateAuthorityData, c.CertificateAuthority = nil, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
		}, `cluster "east" sets certificate-authority (/var/run/secrets/kubernetes.io/serviceaccount/ca.crt), a file path: embed the CA as certificate-authority-data (kubectl config set-cluster --embed-certs)`},
		"exec": {func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1beta1", Command: "gke-gcloud-auth-plugin"}
		}, `user "plane" sets exec (the command gke-gcloud-auth-plugin): the plane runs no command a Secret names; put a token or client-certificate-data and client-key-data in the user, or list the member as a ClusterProfile whose provider the plane's credential providers file runs`},
		"auth-provider": {func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}, `user "plane" sets auth-provider (oidc): the plane runs no auth provider a Secret names; put a token or client-certificate-data and client-key-data in the user`},
		"insecure-skip-tls-verify": {func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.CertificateAuthorityData, c.InsecureSkipTLSVerify = nil, true
		}, `cluster "east" sets insecure-skip-tls-verify: the plane would send its credentials to whichever server answers at https://east.example.com:6443; give the member's CA as certificate-authority-data instead ` + insecure},
		"a plain http server": {func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.Server = "http://east.example.com:8080"
		}, `cluster "east" has the server http://east.example.com:8080, without TLS: the plane's credentials would cross the network in clear; use the member's https address with certificate-authority-data ` + insecure},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, server, err := memberKubeconfig("east", where, kubeconfig(t, tc.edit), false)
			if err == nil || err.Error() != prefix+tc.want {
				t.Fatalf("got %v (config %v)\nwant %s", err, cfg, prefix+tc.want)
			}
			if cfg != nil || server != "" {
				t.Errorf("a refused kubeconfig gave a configuration %v for %q", cfg, server)
			}
		})
	}

	// Every refused field of every entry, used by the current context or
	// not, is named at once, users first, each sorted by name.
	two := clientcmdapi.NewConfig()
	two.Clusters["east"] = &clientcmdapi.Cluster{Server: "https://east.example.com", InsecureSkipTLSVerify: true}
	two.Clusters["spare"] = &clientcmdapi.Cluster{Server: "https://spare.example.com", CertificateAuthority: "/ca.crt"}
	two.AuthInfos["plane"] = &clientcmdapi.AuthInfo{Token: "t"}
	two.AuthInfos["other"] = &clientcmdapi.AuthInfo{TokenFile: "/token"}
	two.Contexts["east"] = &clientcmdapi.Context{Cluster: "east", AuthInfo: "plane"}
	two.CurrentContext = "east"
	data, err := clientcmd.Write(*two)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = memberKubeconfig("east", where, data, false)
	want := prefix + `user "other" sets tokenFile (/token): the plane reads no file of its own for a member; put the token itself in the user's token; ` +
		`cluster "east" sets insecure-skip-tls-verify: the plane would send its credentials to whichever server answers at https://east.example.com; give the member's CA as certificate-authority-data instead ` + insecure + `; ` +
		`cluster "spare" sets certificate-authority (/ca.crt), a file path: embed the CA as certificate-authority-data (kubectl config set-cluster --embed-certs)`
	if err == nil || err.Error() != want {
		t.Errorf("a kubeconfig with three refused fields:\ngot  %v\nwant %s", err, want)
	}
}

// TestKubeconfigAccepted: a kubeconfig with its data embedded and a token
// reaches its server; with insecure kubeconfigs allowed (test clusters),
// insecure-skip-tls-verify and a plain http server pass, and file paths,
// tokenFile and exec are still refused.
func TestKubeconfigAccepted(t *testing.T) {
	cfg, server, err := memberKubeconfig("east", where, kubeconfig(t, nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://east.example.com:6443" || cfg.BearerToken != "t0ken" || server != "https://east.example.com:6443" {
		t.Errorf("got host %s, token %q, server %q", cfg.Host, cfg.BearerToken, server)
	}

	insecure, server, err := memberKubeconfig("east", where, kubeconfig(t, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		c.CertificateAuthorityData, c.InsecureSkipTLSVerify = nil, true
	}), true)
	if err != nil || !insecure.Insecure || server != "https://east.example.com:6443" {
		t.Errorf("insecure-skip-tls-verify, allowed: %v, insecure %v, server %q", err, insecure != nil && insecure.Insecure, server)
	}
	plain, server, err := memberKubeconfig("east", where, kubeconfig(t, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		c.Server, c.CertificateAuthorityData = "http://east.example.com", nil
	}), true)
	if err != nil || plain.Host != "http://east.example.com" || server != "http://east.example.com:80" {
		t.Errorf("a plain http server, allowed: %v, server %q", err, server)
	}
	for field, edit := range map[string]func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo){
		"tokenFile":             func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.TokenFile = "/token" },
		"certificate-authority": func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthority = "/ca.crt" },
		"client-certificate":    func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificate = "/tls.crt" },
		"exec": func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Exec = &clientcmdapi.ExecConfig{Command: "x"}
		},
	} {
		if _, _, err := memberKubeconfig("east", where, kubeconfig(t, edit), true); err == nil || !strings.Contains(err.Error(), "sets "+field+" (") {
			t.Errorf("%s with insecure kubeconfigs allowed: %v, want it refused", field, err)
		}
	}

	if _, _, err := memberKubeconfig("east", where, []byte("{not yaml"), false); err == nil ||
		!strings.HasPrefix(err.Error(), "Secret ome/east-kubeconfig, key kubeconfig, for member east, does not hold a kubeconfig: ") {
		t.Errorf("garbage: %v", err)
	}
}

func TestServerID(t *testing.T) {
	for in, want := range map[string]string{
		"https://East.Example.com":         "https://east.example.com:443",
		"https://east.example.com:443/":    "https://east.example.com:443",
		"HTTPS://10.0.0.1:6443":            "https://10.0.0.1:6443",
		"http://east":                      "http://east:80",
		"https://[::1]:6443":               "https://[::1]:6443",
		"https://proxy.ocm:9092/cluster1/": "https://proxy.ocm:9092/cluster1",
		"https://proxy.ocm:9092/Cluster1":  "https://proxy.ocm:9092/Cluster1",
		"":                                 "",
	} {
		if got := serverID(in); got != want {
			t.Errorf("serverID(%q) = %q, want %q", in, got, want)
		}
	}
}
