package plane

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/pkg/apis/clientauthentication"
	clientauthinstall "k8s.io/client-go/pkg/apis/clientauthentication/install"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
	"sigs.k8s.io/yaml"
)

// How the plane checks the way it reaches a member before it uses it. A
// member it will not reach that way is unreachable, and why starts with
// one of these reasons: its Member event's message, and so the member's
// entry in each fleet node's status.clusters, carries it.
const (
	// ReasonKubeconfigRefused: the member's kubeconfig Secret asks the
	// plane for something it refuses to do for a member: read a file of
	// its own (tokenFile, client-certificate, client-key,
	// certificate-authority), run a command (exec, auth-provider), or,
	// unless allowed for test clusters, trust a server it cannot verify
	// (insecure-skip-tls-verify, a plain http server).
	ReasonKubeconfigRefused = "KubeconfigRefused"
	// ReasonNoCredentialProvider: the member's ClusterProfile publishes no
	// access provider that the credential providers file names.
	ReasonNoCredentialProvider = "NoCredentialProvider"
	// ReasonCredentialPluginFailed: the credential plugin of the profile's
	// provider failed when the plane ran it, in its own words.
	ReasonCredentialPluginFailed = "CredentialPluginFailed"
	// ReasonDuplicateCluster: the entry reaches a cluster that another
	// entry of the inventory already reaches; the plane counts it once.
	ReasonDuplicateCluster = "DuplicateCluster"
)

// insecureHint says how a test cluster's kubeconfig gets past the checks
// of the server's identity.
const insecureHint = "for a test cluster only, --members-allow-insecure-kubeconfigs (the chart's quotaManager.projection.allowInsecureKubeconfigs) accepts it"

// memberKubeconfig checks the kubeconfig that reaches member, found at
// where (its Secret and key), and builds the member's client
// configuration from it. It refuses every cluster and user entry of the
// kubeconfig, used or not, that makes the plane read one of its own files
// or run a command: whoever can write the Secret could otherwise have the
// plane send them its own token. Unless allowInsecure, it also refuses a
// cluster whose server the plane cannot verify. It returns the server
// the configuration reaches, normalized by serverID, the form in which
// duplicates compares two entries.
func memberKubeconfig(member, where string, data []byte, allowInsecure bool) (*rest.Config, string, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s, for member %s, does not hold a kubeconfig: %w", where, member, err)
	}
	var refused []string
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		u := cfg.AuthInfos[name]
		if u == nil {
			continue
		}
		if u.TokenFile != "" {
			refused = append(refused, fmt.Sprintf("user %q sets tokenFile (%s): the plane reads no file of its own for a member; put the token itself in the user's token", name, u.TokenFile))
		}
		if u.ClientCertificate != "" {
			refused = append(refused, fmt.Sprintf("user %q sets client-certificate (%s), a file path: embed the certificate as client-certificate-data (kubectl config set-credentials --embed-certs)", name, u.ClientCertificate))
		}
		if u.ClientKey != "" {
			refused = append(refused, fmt.Sprintf("user %q sets client-key (%s), a file path: embed the key as client-key-data (kubectl config set-credentials --embed-certs)", name, u.ClientKey))
		}
		if u.Exec != nil {
			refused = append(refused, fmt.Sprintf("user %q sets exec (the command %s): the plane runs no command a Secret names; put a token or client-certificate-data and client-key-data in the user, or list the member as a ClusterProfile whose provider the plane's credential providers file runs", name, u.Exec.Command))
		}
		if u.AuthProvider != nil {
			refused = append(refused, fmt.Sprintf("user %q sets auth-provider (%s): the plane runs no auth provider a Secret names; put a token or client-certificate-data and client-key-data in the user", name, u.AuthProvider.Name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		c := cfg.Clusters[name]
		if c == nil {
			continue
		}
		if c.CertificateAuthority != "" {
			refused = append(refused, fmt.Sprintf("cluster %q sets certificate-authority (%s), a file path: embed the CA as certificate-authority-data (kubectl config set-cluster --embed-certs)", name, c.CertificateAuthority))
		}
		if allowInsecure {
			continue
		}
		if c.InsecureSkipTLSVerify {
			refused = append(refused, fmt.Sprintf("cluster %q sets insecure-skip-tls-verify: the plane would send its credentials to whichever server answers at %s; give the member's CA as certificate-authority-data instead (%s)", name, c.Server, insecureHint))
		}
		if u, err := url.Parse(c.Server); err == nil && strings.EqualFold(u.Scheme, "http") {
			refused = append(refused, fmt.Sprintf("cluster %q has the server %s, without TLS: the plane's credentials would cross the network in clear; use the member's https address with certificate-authority-data (%s)", name, c.Server, insecureHint))
		}
	}
	if len(refused) > 0 {
		return nil, "", fmt.Errorf("%s: %s, for member %s: %s", ReasonKubeconfigRefused, where, member, strings.Join(refused, "; "))
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%s, for member %s, does not hold a usable kubeconfig: %w", where, member, err)
	}
	return rc, serverID(rc.Host), nil
}

// serverID is the form in which two entries' servers are compared: the
// scheme and host in lower case, the scheme's default port made explicit,
// and the path without a trailing slash (a proxy such as OCM's
// cluster-proxy tells clusters apart by path). "" for an empty server.
func serverID(server string) string {
	if server == "" {
		return ""
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return strings.ToLower(strings.TrimRight(server, "/"))
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[scheme]
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/")
}

// clusterEntry is one entry of an inventory, for duplicates: the member
// it lists, how messages name the entry, what it says the cluster is (a
// label and a value each, e.g. "the server" and its address), and its
// rank: entries are kept in the order of rank, then name.
type clusterEntry struct {
	member string
	what   string
	ids    []clusterID
	rank   time.Time
}

type clusterID struct{ label, value string }

// duplicates finds the entries that name a cluster an earlier entry
// (by rank, then member name) already names, through any of their ids:
// the earlier one is counted, each later one is refused with why, which
// names both entries and keep (how the one counted was chosen) and says
// what to do.
func duplicates(entries []clusterEntry, keep, fix string) map[string]error {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b clusterEntry) int {
		return cmp.Or(a.rank.Compare(b.rank), cmp.Compare(a.member, b.member))
	})
	owner := map[clusterID]clusterEntry{}
	refused := map[string]error{}
	for _, e := range sorted {
		var first *clusterEntry
		var same clusterID
		for _, id := range e.ids {
			if id.value == "" {
				continue
			}
			if o, ok := owner[id]; ok {
				first, same = &o, id
				break
			}
		}
		if first != nil {
			refused[e.member] = fmt.Errorf("%s: %s names the same cluster as %s (%s %s): the plane counts a cluster once, as %s, %s; %s",
				ReasonDuplicateCluster, e.what, first.what, same.label, same.value, first.member, keep, fix)
		}
		for _, id := range e.ids {
			if id.value == "" {
				continue
			}
			if _, ok := owner[id]; !ok {
				if first != nil {
					owner[id] = *first
				} else {
					owner[id] = e
				}
			}
		}
	}
	return refused
}

// accessProviderOf is the access provider of the profile through which
// the plane reaches it: the first provider of the credential providers
// file that the profile publishes (in status.accessProviders, or the
// deprecated status.credentialProviders), as the credentials package
// picks it. With none, the error names what the profile publishes and
// what the file has.
func accessProviderOf(cp *cpv1alpha1.ClusterProfile, creds *credentials.CredentialsProvider, file string) (*cpv1alpha1.AccessProvider, error) {
	published := map[string]*cpv1alpha1.AccessProvider{}
	var names []string
	for _, list := range [][]cpv1alpha1.AccessProvider{cp.Status.CredentialProviders, cp.Status.AccessProviders} {
		for i := range list {
			if _, ok := published[list[i].Name]; !ok {
				names = append(names, list[i].Name)
			}
			published[list[i].Name] = &list[i]
		}
	}
	for _, p := range creds.Providers {
		if ap, ok := published[p.Name]; ok {
			return ap, nil
		}
	}
	what := fmt.Sprintf("ClusterProfile %s/%s", cp.Namespace, cp.Name)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: %s publishes no access provider (its status.accessProviders is empty), and the credential providers file %s has %s: its cluster manager has not published one yet; once it does, the plane reaches the cluster through the provider of that name",
			ReasonNoCredentialProvider, what, file, providerNames(creds))
	}
	return nil, fmt.Errorf("%s: %s publishes the access providers %s, and the credential providers file %s has %s: add a provider named after one of the profile's to the file (the chart's quotaManager.projection.clusterProfiles.providers, with its plugin), or have the profile publish one the file has",
		ReasonNoCredentialProvider, what, strings.Join(names, ", "), file, providerNames(creds))
}

// Bounds of one run of a credential plugin by the plane.
const (
	// pluginTimeout is how long the plane waits for a plugin's answer.
	pluginTimeout = 30 * time.Second
	// pluginRetry is how soon a plugin that failed is run again.
	pluginRetry = 30 * time.Second
	// pluginWords is how much of a plugin's standard error a reason
	// carries: its last bytes.
	pluginWords = 1024
)

// execCodecs read and write the ExecCredentials of the credential plugin
// protocol, in the versions client-go speaks.
var execCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	clientauthinstall.Install(s)
	return serializer.NewCodecFactory(s)
}()

// runCredentialPlugin runs the exec credential plugin of cfg once, as
// client-go will run it for every request of the plane's clients there:
// the same command, arguments and environment, and the same input
// (KUBERNETES_EXEC_INFO, with the cluster when the provider asks for it).
// client-go reports a failing plugin by its exit code alone (its words go
// to the plane's standard error); this run keeps them: an error carries
// what the plugin wrote on its standard error, and why its answer holds
// no credential. what names the profile and provider for the message.
func runCredentialPlugin(ctx context.Context, cfg *rest.Config, what string, timeout time.Duration) error {
	ec := cfg.ExecProvider
	if ec == nil {
		return nil
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s", ReasonCredentialPluginFailed, what, fmt.Sprintf(format, args...))
	}
	const fix = "fix what the plugin needs (its credentials, its access to them), or the provider's entry in the credential providers file; the plane runs it again every %s"
	gv, err := schema.ParseGroupVersion(ec.APIVersion)
	if err != nil || gv.Group != clientauthentication.GroupName {
		return fail("the provider's execConfig.apiVersion %q is not one client-go speaks (client.authentication.k8s.io/v1 or v1beta1): correct it in the credential providers file", ec.APIVersion)
	}
	in := &clientauthentication.ExecCredential{Spec: clientauthentication.ExecCredentialSpec{Interactive: false}}
	if ec.ProvideClusterInfo {
		cluster, err := rest.ConfigToExecCluster(cfg)
		if err != nil {
			return fail("its cluster cannot be passed to the plugin: %v", err)
		}
		in.Spec.Cluster = cluster
	}
	input, err := runtime.Encode(execCodecs.LegacyCodec(gv), in)
	if err != nil {
		return fail("the provider's execConfig.apiVersion %q is not one client-go speaks (client.authentication.k8s.io/v1 or v1beta1): correct it in the credential providers file (%v)", ec.APIVersion, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ec.Command, ec.Args...)
	cmd.Env = os.Environ()
	for _, e := range ec.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(input))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A plugin's children that hold its output open do not hold the plane.
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	words := pluginSaid(stderr.Bytes())
	var exitErr *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return fail("the plugin %s is not in the plane's container: install it there (docs/install.md, Credential plugins), or correct execConfig.command", ec.Command)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fail("the plugin %s gave no answer within %s%s: "+fix, ec.Command, timeout, words, pluginRetry)
	case errors.As(err, &exitErr):
		return fail("the plugin %s exited with status %d%s: "+fix, ec.Command, exitErr.ExitCode(), words, pluginRetry)
	case err != nil:
		return fail("the plugin %s could not be run: %v: install it in the plane's container as an executable, or correct execConfig.command", ec.Command, err)
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(stdout.Bytes(), &tm); err != nil || tm.Kind != "ExecCredential" {
		return fail("the plugin %s printed no ExecCredential%s: "+fix, ec.Command, words, pluginRetry)
	}
	if tm.APIVersion != gv.String() {
		return fail("the plugin %s answered in %s, but its provider's execConfig.apiVersion is %s: make them agree in the credential providers file", ec.Command, tm.APIVersion, gv)
	}
	out := &clientauthentication.ExecCredential{}
	if _, _, err := execCodecs.UniversalDecoder(gv).Decode(stdout.Bytes(), nil, out); err != nil {
		return fail("the plugin %s printed an ExecCredential that does not decode (%v)%s: "+fix, ec.Command, err, words, pluginRetry)
	}
	if out.Status == nil || (out.Status.Token == "" && (out.Status.ClientCertificateData == "" || out.Status.ClientKeyData == "")) {
		return fail("the plugin %s answered with no token and no client certificate and key%s: "+fix, ec.Command, words, pluginRetry)
	}
	return nil
}

// pluginSaid is what a plugin wrote on its standard error, for a
// message: its last pluginWords bytes on one line, quoted after "and
// said"; "" when it said nothing.
func pluginSaid(stderr []byte) string {
	s := strings.TrimSpace(string(stderr))
	if s == "" {
		return ", saying nothing on its standard error"
	}
	if len(s) > pluginWords {
		s = "..." + s[len(s)-pluginWords:]
	}
	return fmt.Sprintf(" and said %q", strings.Join(strings.Fields(s), " "))
}
