package plane

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager"
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

// TestDuplicates: entries that name one cluster (the same Secret and key,
// or the same server) make one member, the first by rank and then name;
// each other is refused with both entries named.
func TestDuplicates(t *testing.T) {
	secret := func(s string) clusterID { return clusterID{"the Secret and key", s} }
	server := func(s string) clusterID { return clusterID{"the server", s} }
	got := duplicates([]clusterEntry{
		{member: "west", what: "the entry west", ids: []clusterID{secret("west-kubeconfig, key kubeconfig"), server("https://west:443")}},
		{member: "east2", what: "the entry east2", ids: []clusterID{secret("east2-kubeconfig, key kubeconfig"), server("https://east:443")}},
		{member: "east", what: "the entry east", ids: []clusterID{secret("east-kubeconfig, key kubeconfig"), server("https://east:443")}},
		{member: "east3", what: "the entry east3", ids: []clusterID{secret("east2-kubeconfig, key kubeconfig")}}, // its Secret not read yet
		{member: "south", what: "the entry south", ids: []clusterID{secret("south-kubeconfig, key kubeconfig"), server("")}},
		{member: "north", what: "the entry north", ids: []clusterID{secret("north-kubeconfig, key kubeconfig"), server("")}},
	}, "the first by name", "drop one")
	want := map[string]string{
		"east2": "DuplicateCluster: the entry east2 names the same cluster as the entry east (the server https://east:443): the plane counts a cluster once, as east, the first by name; drop one",
		"east3": "DuplicateCluster: the entry east3 names the same cluster as the entry east (the Secret and key east2-kubeconfig, key kubeconfig): the plane counts a cluster once, as east, the first by name; drop one",
	}
	if len(got) != len(want) {
		t.Errorf("refused %v, want %v", got, want)
	}
	for name, msg := range want {
		if got[name] == nil || got[name].Error() != msg {
			t.Errorf("%s: got %v\nwant %s", name, got[name], msg)
		}
	}

	// Profiles: the older is kept, whatever its name.
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got = duplicates([]clusterEntry{
		{member: "a-new", what: "ClusterProfile ome/a-new", ids: []clusterID{server("https://east:443")}, rank: old.Add(time.Hour)},
		{member: "z-old", what: "ClusterProfile ome/z-old", ids: []clusterID{server("https://east:443")}, rank: old},
	}, "the older profile", "delete one")
	if len(got) != 1 || got["a-new"] == nil || got["a-new"].Error() != "DuplicateCluster: ClusterProfile ome/a-new names the same cluster as ClusterProfile ome/z-old (the server https://east:443): the plane counts a cluster once, as z-old, the older profile; delete one" {
		t.Errorf("profiles: %v", got)
	}
}

// profile is a ClusterProfile of namespace ome labelled fleet=gpu that
// publishes access providers of those names, each reaching server.
func profile(name, server string, created time.Time, providers ...string) *cpv1alpha1.ClusterProfile {
	cp := &cpv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "ome", Name: name, Labels: map[string]string{"fleet": "gpu"},
		CreationTimestamp: metav1.NewTime(created)}}
	for _, p := range providers {
		ap := cpv1alpha1.AccessProvider{Name: p}
		ap.Cluster.Server = server
		ap.Cluster.Extensions = append(ap.Cluster.Extensions, clientcmdv1.NamedExtension{Name: "client.authentication.k8s.io/exec",
			Extension: runtime.RawExtension{Raw: []byte(`{"clusterName":"` + name + `"}`)}})
		cp.Status.AccessProviders = append(cp.Status.AccessProviders, ap)
	}
	return cp
}

// TestNoCredentialProvider: a profile whose access providers the file does
// not name is unreachable for a reason of its own that names both lists;
// the provider chosen is the file's first that the profile publishes.
func TestNoCredentialProvider(t *testing.T) {
	creds := credentials.New([]credentials.Provider{
		{Name: "secretreader", ExecConfig: &clientcmdapi.ExecConfig{Command: "/secretreader-plugin"}},
		{Name: "google", ExecConfig: &clientcmdapi.ExecConfig{Command: "/plugins/gcp-auth-plugin"}},
	})
	const file = "/etc/ome-quota-manager/clusterprofiles/providers.json"
	_, err := accessProviderOf(profile("east", "https://east", time.Time{}, "open-cluster-management", "kubectl"), creds, file)
	want := "NoCredentialProvider: ClusterProfile ome/east publishes the access providers open-cluster-management, kubectl, and the credential providers file " + file +
		" has secretreader, google: add a provider named after one of the profile's to the file (the chart's quotaManager.projection.clusterProfiles.providers, with its plugin), or have the profile publish one the file has"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	_, err = accessProviderOf(profile("east", "https://east", time.Time{}), creds, file)
	want = "NoCredentialProvider: ClusterProfile ome/east publishes no access provider (its status.accessProviders is empty), and the credential providers file " + file +
		" has secretreader, google: its cluster manager has not published one yet; once it does, the plane reaches the cluster through the provider of that name"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	ap, err := accessProviderOf(profile("east", "https://east", time.Time{}, "google", "secretreader"), creds, file)
	if err != nil || ap.Name != "secretreader" {
		t.Errorf("a profile with both providers is reached through %v (%v), want secretreader, the file's first", ap, err)
	}
}

// plugin writes an executable shell script and returns its path.
func plugin(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// execCredential is what a working plugin prints.
const execCredential = `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t0ken"}}`

// pluginConfig is a profile's configuration with command as its plugin,
// built as the plane builds it.
func pluginConfig(t *testing.T, command string) *rest.Config {
	t.Helper()
	creds := credentials.New([]credentials.Provider{{Name: "secretreader", ExecConfig: &clientcmdapi.ExecConfig{
		APIVersion: "client.authentication.k8s.io/v1", Command: command, ProvideClusterInfo: true}}})
	cfg, err := creds.BuildConfigFromCP(profile("east", "https://east.example.com", time.Time{}, "secretreader"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCredentialPluginFailed: a plugin that fails gives a reason of its
// own with its own words (what it wrote on its standard error and its exit
// status), not client-go's exit code alone; so do a plugin that is
// missing, one that answers no credential and one that does not answer.
// A plugin that answers a token, given the profile's cluster as client-go
// gives it, passes.
func TestCredentialPluginFailed(t *testing.T) {
	ctx := context.Background()
	const what = "ClusterProfile ome/east, access provider secretreader"
	const retry = "fix what the plugin needs (its credentials, its access to them), or the provider's entry in the credential providers file; the plane runs it again every 30s"
	failing := plugin(t, "echo 'reading Secret ome/east: secrets \"east\" is forbidden: User \"system:serviceaccount:ome:ome-quota-manager\" cannot get resource \"secrets\"' >&2\nexit 1\n")
	err := runCredentialPlugin(ctx, pluginConfig(t, failing), what, time.Minute)
	want := "CredentialPluginFailed: " + what + ": the plugin " + failing + ` exited with status 1 and said "reading Secret ome/east: secrets \"east\" is forbidden: User \"system:serviceaccount:ome:ome-quota-manager\" cannot get resource \"secrets\"": ` + retry
	if err == nil || err.Error() != want {
		t.Errorf("a failing plugin:\ngot  %v\nwant %s", err, want)
	}

	missing := filepath.Join(t.TempDir(), "cp-creds")
	err = runCredentialPlugin(ctx, pluginConfig(t, missing), what, time.Minute)
	want = "CredentialPluginFailed: " + what + ": the plugin " + missing + " is not in the plane's container: install it there (docs/install.md, Credential plugins), or correct execConfig.command"
	if err == nil || err.Error() != want {
		t.Errorf("a missing plugin:\ngot  %v\nwant %s", err, want)
	}

	empty := plugin(t, `echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}'`+"\n")
	err = runCredentialPlugin(ctx, pluginConfig(t, empty), what, time.Minute)
	want = "CredentialPluginFailed: " + what + ": the plugin " + empty + " answered with no token and no client certificate and key, saying nothing on its standard error: " + retry
	if err == nil || err.Error() != want {
		t.Errorf("a plugin without a credential:\ngot  %v\nwant %s", err, want)
	}

	garbage := plugin(t, "echo 'token: t0ken'\necho 'using the default token' >&2\n")
	err = runCredentialPlugin(ctx, pluginConfig(t, garbage), what, time.Minute)
	want = "CredentialPluginFailed: " + what + ": the plugin " + garbage + ` printed no ExecCredential and said "using the default token": ` + retry
	if err == nil || err.Error() != want {
		t.Errorf("a plugin that prints no ExecCredential:\ngot  %v\nwant %s", err, want)
	}

	v1beta1 := plugin(t, `echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}'`+"\n")
	err = runCredentialPlugin(ctx, pluginConfig(t, v1beta1), what, time.Minute)
	want = "CredentialPluginFailed: " + what + ": the plugin " + v1beta1 + " answered in client.authentication.k8s.io/v1beta1, but its provider's execConfig.apiVersion is client.authentication.k8s.io/v1: make them agree in the credential providers file"
	if err == nil || err.Error() != want {
		t.Errorf("a plugin of another version:\ngot  %v\nwant %s", err, want)
	}

	silent := plugin(t, "exec sleep 60\n")
	err = runCredentialPlugin(ctx, pluginConfig(t, silent), what, 100*time.Millisecond)
	want = "CredentialPluginFailed: " + what + ": the plugin " + silent + " gave no answer within 100ms, saying nothing on its standard error: " + retry
	if err == nil || err.Error() != want {
		t.Errorf("a plugin that does not answer:\ngot  %v\nwant %s", err, want)
	}

	// The profile's cluster reaches the plugin as client-go passes it:
	// this one answers only when it is given the cluster's name.
	working := plugin(t, `case "$KUBERNETES_EXEC_INFO" in
*'"clusterName":"east"'*) echo '`+execCredential+`' ;;
*) echo "no clusterName in $KUBERNETES_EXEC_INFO" >&2; exit 2 ;;
esac
`)
	if err := runCredentialPlugin(ctx, pluginConfig(t, working), what, time.Minute); err != nil {
		t.Errorf("a working plugin: %v", err)
	}
}

// testPlane is a plane that only records the accesses it is given, and a
// stream that holds what the inventory publishes.
func testPlane(t *testing.T, o *manager.Options) (*testHost, *plane) {
	t.Helper()
	h := newTestHost(o)
	return h, &plane{h: h, opts: o, running: map[string]*planeMember{}, access: map[string]memberAccess{}}
}

// memberships drains the stream: the members it last published, with
// each one's message when it left.
func publishedMembers(t *testing.T, m *testHost) (members []string, left map[string]string) {
	t.Helper()
	m.stream.Close()
	in := map[string]bool{}
	left = map[string]string{}
	if err := m.stream.Consume(context.Background(), func(ev events.Event) error {
		if ev.Membership.Member {
			in[ev.Key] = true
		} else {
			delete(in, ev.Key)
			left[ev.Key] = ev.Membership.Message
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name := range in {
		members = append(members, name)
	}
	slices.Sort(members)
	return members, left
}

// accessErr is the error of the plane's access to name, "" when it has a
// configuration, "none" when it has no access at all.
func accessErr(p *plane, name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.access[name]
	switch {
	case !ok:
		return "none"
	case a.err != nil:
		return a.err.Error()
	case a.config == nil:
		return "no configuration"
	}
	return ""
}

// TestProfileInventory: of the selected profiles, one without a matching
// provider is a member that the plane cannot reach, for its own reason;
// one that reaches the server of an older one is not a member, and says
// why; the others are members whose plugin runs before the plane gets
// their access: a failing plugin leaves the member unreachable with the
// plugin's words, until a later run succeeds.
func TestProfileInventory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	script := filepath.Join(dir, "plugin")
	write := func(body string) {
		t.Helper()
		// Written beside and renamed, so that a run never finds it half
		// written.
		if err := os.WriteFile(script+".new", []byte("#!/bin/sh\n"+body), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(script+".new", script); err != nil {
			t.Fatal(err)
		}
	}
	write("echo \"no token for $0: Secret ome/west is missing\" >&2\nexit 1\n")
	_, p := testPlane(t, manager.DefaultOptions())
	sel, err := labels.Parse("fleet=gpu")
	if err != nil {
		t.Fatal(err)
	}
	inv := &profileInventory{p: p, namespace: "ome", selector: sel, file: "providers.json",
		creds: credentials.New([]credentials.Provider{{Name: "secretreader", ExecConfig: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: script, ProvideClusterInfo: true}}}),
		pluginTimeout: time.Minute, pluginRetry: 10 * time.Millisecond, probes: map[string]*pluginProbe{}, refused: map[string]string{}}
	inv.members.h = p.h
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	profiles := []*cpv1alpha1.ClusterProfile{
		profile("west", "https://west.example.com", old, "secretreader"),
		profile("east", "https://east.example.com", old, "open-cluster-management"),
		profile("a-west-again", "https://WEST.example.com:443/", old.Add(time.Minute), "secretreader"),
		profile("other", "https://west.example.com", old, "secretreader"),
	}
	profiles[3].Labels = nil // not selected: it names west's server, and counts for nothing
	inv.mu.Lock()
	next, accesses, refused, wanted := inv.read(profiles)
	inv.mu.Unlock()
	if got := slices.Sorted(maps.Keys(next)); !slices.Equal(got, []string{"east", "west"}) {
		t.Errorf("members %v, want east and west", got)
	}
	if err := accesses["east"].err; err == nil || !strings.HasPrefix(err.Error(), "NoCredentialProvider: ClusterProfile ome/east publishes the access providers open-cluster-management, and the credential providers file providers.json has secretreader: ") {
		t.Errorf("east's access: %v", err)
	}
	wantDup := "DuplicateCluster: ClusterProfile ome/a-west-again names the same cluster as ClusterProfile ome/west (the server https://west.example.com:443): the plane counts a cluster once, as west, the older profile (the first by name among profiles created in the same second); delete one of the profiles, or take one out of the plane's selector"
	if err := refused["a-west-again"]; err == nil || err.Error() != wantDup {
		t.Errorf("a-west-again: %v\nwant %s", err, wantDup)
	}
	if got := slices.Sorted(maps.Keys(wanted)); !slices.Equal(got, []string{"west"}) {
		t.Errorf("plugins to run for %v, want west's alone", got)
	}

	// Through the plane: west's plugin fails, then works.
	inv.mu.Lock()
	inv.probes["west"] = wanted["west"]
	inv.mu.Unlock()
	inv.probe(ctx, "west", wanted["west"])
	want := "CredentialPluginFailed: ClusterProfile ome/west, access provider secretreader: the plugin " + script + ` exited with status 1 and said "no token for ` + script + `: Secret ome/west is missing": `
	if got := accessErr(p, "west"); !strings.HasPrefix(got, want) {
		t.Fatalf("west's access: %s\nwant %s...", got, want)
	}
	write("echo '" + execCredential + "'\n")
	deadline := time.Now().Add(time.Minute)
	for accessErr(p, "west") != "" {
		if time.Now().After(deadline) {
			t.Fatalf("west's plugin works, but the plane's access to west is still %s", accessErr(p, "west"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSecretInventoryDuplicates: two entries of the members' ConfigMap
// whose kubeconfigs reach one server, or that name one Secret and key,
// make one member, the first by name; the other is not a member, and the
// plane never reaches the cluster through it; a refused kubeconfig keeps
// its member, unreachable for its reason.
func TestSecretInventoryDuplicates(t *testing.T) {
	ctx := context.Background()
	m, p := testPlane(t, manager.DefaultOptions())
	inv := newSecretInventory(p, "ome")
	read := func(member, secret string, data []byte) *secretWatch {
		cfg, server, err := memberKubeconfig(member, "Secret ome/"+secret+", key kubeconfig", data, false)
		return &secretWatch{secret: secret, key: "kubeconfig", stop: func() {}, read: true,
			access: accessOf(cfg, err, "secret", secret, string(data)), server: server}
	}
	west := kubeconfig(t, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "https://west.example.com" })
	inv.entries = map[string]string{"east": "east-kubeconfig", "east-2": "east-2", "east-3": "east-kubeconfig", "west": "west-kubeconfig", "south": "south-kubeconfig"}
	inv.secrets = map[string]*secretWatch{
		"east":   read("east", "east-kubeconfig", kubeconfig(t, nil)),
		"east-2": read("east-2", "east-2", kubeconfig(t, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "https://EAST.example.com:6443/" })),
		"east-3": {secret: "east-kubeconfig", key: "kubeconfig", stop: func() {}}, // not read yet
		"west":   read("west", "west-kubeconfig", west),
		"south": read("south", "south-kubeconfig", kubeconfig(t, func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			c.Server, u.Token, u.TokenFile = "https://south.example.com", "", "/var/run/secrets/kubernetes.io/serviceaccount/token"
		})),
	}
	inv.refresh(ctx)
	source := "ConfigMap ome/ome-quota-manager-members"
	for member, want := range map[string]string{
		"east": "", "west": "",
		"east-2": "DuplicateCluster: the entry east-2 of " + source + " names the same cluster as the entry east of " + source + " (the server https://east.example.com:6443): the plane counts a cluster once, as east, the first by name; drop one of the entries (the chart's quotaManager.projection.clusters), or point its kubeconfig at a cluster of its own",
		"east-3": "DuplicateCluster: the entry east-3 of " + source + " names the same cluster as the entry east of " + source + " (the Secret and key east-kubeconfig, key kubeconfig): the plane counts a cluster once, as east, the first by name; drop one of the entries (the chart's quotaManager.projection.clusters), or point its kubeconfig at a cluster of its own",
		"south":  `KubeconfigRefused: Secret ome/south-kubeconfig, key kubeconfig, for member south: user "plane" sets tokenFile (/var/run/secrets/kubernetes.io/serviceaccount/token): the plane reads no file of its own for a member; put the token itself in the user's token`,
	} {
		if got := accessErr(p, member); got != want {
			t.Errorf("the plane's access to %s: %s\nwant %s", member, got, want)
		}
	}
	members, left := publishedMembers(t, m)
	if !slices.Equal(members, []string{"east", "south", "west"}) || len(left) != 0 {
		t.Errorf("members %v (left: %v), want east, south and west", members, left)
	}

	// east-2 first by name: a rename makes it the member, and east leaves,
	// saying why.
	m, p = testPlane(t, manager.DefaultOptions())
	inv.p, inv.members = p, memberships{h: p.h, published: map[string]events.Membership{"east": {Member: true, Source: source + " (Secret east-kubeconfig, key kubeconfig)"}}}
	inv.entries = map[string]string{"east": "east-kubeconfig", "a-east": "east-2"}
	inv.secrets = map[string]*secretWatch{"east": inv.secrets["east"], "a-east": read("a-east", "east-2", kubeconfig(t, nil))}
	inv.refresh(ctx)
	members, left = publishedMembers(t, m)
	if !slices.Equal(members, []string{"a-east"}) || !strings.HasPrefix(left["east"], "DuplicateCluster: the entry east of "+source+" names the same cluster as the entry a-east of ") {
		t.Errorf("members %v, left %v", members, left)
	}
	if got := accessErr(p, "east"); !strings.HasPrefix(got, "DuplicateCluster: ") {
		t.Errorf("the plane may still reach east, which left as a duplicate: %q", got)
	}
}
