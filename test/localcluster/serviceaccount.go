package localcluster

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountToken is an hour's TokenRequest token of ServiceAccount
// ns/name.
func (c *Cluster) ServiceAccountToken(ctx context.Context, ns, name string) (string, error) {
	hour := int64(3600)
	tr, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of ServiceAccount %s/%s: %w", ns, name, err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("the TokenRequest for ServiceAccount %s/%s returned no token", ns, name)
	}
	return tr.Status.Token, nil
}

// WriteServiceAccountKubeconfig writes to path a kubeconfig that holds an
// hour's TokenRequest token of ServiceAccount ns/name, the API server's
// CA and namespace ns: what a pod of that ServiceAccount would mount.
func (c *Cluster) WriteServiceAccountKubeconfig(ctx context.Context, ns, name, path string) error {
	token, err := c.ServiceAccountToken(ctx, ns, name)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	// The namespace a pod of the ServiceAccount runs in, as in-cluster
	// clients (the credential plugins a plane runs, too) infer it.
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa", Namespace: ns}
	cfg.CurrentContext = "sa"
	return clientcmd.WriteToFile(*cfg, path)
}
