package plugin

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	// managerBin is the ome-quota-manager binary, built once for the package.
	managerBin string
)

func TestMain(m *testing.M) {
	opts := localcluster.Options{Kueue: true, Namespaces: []string{"ome", "ml-serving"}}
	os.Exit(localcluster.RunTests(m, opts, true, func(ctx context.Context, p *localcluster.TestPackage) error {
		cluster, managerBin = p.Cluster, p.ManagerBin
		// The guide's cluster: ResourceFlavor a100 and four A100 nodes of 8
		// GPUs, gpu-node-1 to gpu-node-4, so the high-water mark is 32.
		return localcluster.WriteDemoCluster(ctx, p.Cluster)
	}))
}
