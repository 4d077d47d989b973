package plugin

import (
	"context"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	opts := localcluster.Options{Kueue: true, Namespaces: []string{"ome", "ml-serving"}}
	localcluster.Main(m, opts, true, func(ctx context.Context, c *localcluster.Cluster) error {
		cluster = c
		// The guide's cluster: ResourceFlavor a100 and four A100 nodes of 8
		// GPUs, gpu-node-1 to gpu-node-4, so the high-water mark is 32.
		return localcluster.WriteDemoCluster(ctx, c)
	})
}
