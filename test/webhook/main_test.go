package webhook

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

// Kueue's manager is not needed: the webhook reads ResourceFlavors, whose
// CRD is installed either way, and no namespace is enrolled, so the manager
// writes nothing to Kueue.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(forgerEnv); cfg != "" {
		os.Exit(forgerMain(cfg)) // a forger process (startForger), no cluster
	}
	dir, err := os.MkdirTemp("", "ome-webhook-client-")
	if err != nil {
		panic(err)
	}
	admission, err := writeWebhookClient(dir)
	if err != nil {
		panic(err)
	}
	webhookClient = dir
	// The API server presents kubeadm's client certificate to every
	// webhook, set up as docs/install.md's walk-through says
	// (TestClientCertificateRequired, TestClientAuthOnKubeadm).
	// No watch cache of AcceleratorQuotas: a watch resumed from a
	// version etcd compacted away ends with 410 Gone, and the replica
	// lists again (TestConflictAcrossRelist).
	opts := localcluster.Options{APIServerArgs: map[string]string{
		"admission-control-config-file": admission,
		"watch-cache-sizes":             "acceleratorquotas.ome.io#0",
	}, Namespaces: []string{"ome"}}
	code := runTests(m, opts)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func runTests(m *testing.M, opts localcluster.Options) int {
	return localcluster.RunTests(m, opts, true, func(ctx context.Context, c *localcluster.Cluster) error {
		cluster = c
		if err := publishClusterCA(ctx, c); err != nil {
			return err
		}
		// The guide's cluster: ResourceFlavor a100 and four A100 nodes of 8
		// GPUs, so the high-water mark is 32.
		return localcluster.WriteDemoCluster(ctx, c)
	})
}
