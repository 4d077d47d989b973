package manager

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
// the configuration reaches, normalized by serverID.
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
