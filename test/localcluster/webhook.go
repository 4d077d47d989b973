package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// readManifest decodes one YAML file of config/ into obj, strictly.
func readManifest(rel string, obj any) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// InstallWebhook does for the local control plane what the chart does for a
// cluster: it creates the empty Secret the manager fills, and the
// ValidatingWebhookConfiguration from config/webhook, with its Service
// swapped for a URL on 127.0.0.1:port, where the manager serves it. The
// manager must then run with WebhookFlags(port).
func (c *Cluster) InstallWebhook(ctx context.Context, port int) error {
	if err := c.CreateWebhookSecret(ctx); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.CreateWebhookConfig(ctx, port)
}

// CreateWebhookSecret creates config/webhook's empty Secret.
func (c *Cluster) CreateWebhookSecret(ctx context.Context) error {
	var secret corev1.Secret
	if err := readManifest("config/webhook/secret.yaml", &secret); err != nil {
		return err
	}
	if err := c.EnsureNamespace(ctx, secret.Namespace); err != nil {
		return err
	}
	_, err := c.Kube.CoreV1().Secrets(secret.Namespace).Create(ctx, &secret, metav1.CreateOptions{})
	return err
}

// CreateWebhookConfig creates config/webhook's ValidatingWebhookConfiguration
// with its Service swapped for https://127.0.0.1:port.
func (c *Cluster) CreateWebhookConfig(ctx context.Context, port int) error {
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := readManifest("config/webhook/validatingwebhookconfiguration.yaml", &cfg); err != nil {
		return err
	}
	for i := range cfg.Webhooks {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, *cfg.Webhooks[i].ClientConfig.Service.Path)
		cfg.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	_, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{})
	return err
}

// WebhookFlags are the manager's flags for a webhook that the API server
// calls on 127.0.0.1:port.
func WebhookFlags(port int) []string {
	return []string{
		fmt.Sprintf("--webhook-port=%d", port),
		"--webhook-cert-hosts=127.0.0.1",
		"--webhook-cert-secret=ome/ome-quota-manager-webhook-cert",
	}
}
