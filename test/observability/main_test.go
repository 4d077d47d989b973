package observability

import (
	"context"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	// promDir holds the prometheus and promtool binaries.
	promDir string
)

func TestMain(m *testing.M) {
	opts := localcluster.Options{Kueue: true, Namespaces: []string{"ome", "ml-serving"}}
	localcluster.Main(m, opts, true, func(ctx context.Context, c *localcluster.Cluster) (err error) {
		cluster = c
		promDir, err = localcluster.EnsureBinaries(ctx)
		return err
	})
}
