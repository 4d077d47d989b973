package observability

import (
	"context"
	"os"
	"testing"

	quotaclient "ome.io/quota-manager/api/client"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster    *localcluster.Cluster
	aqs        aqtyped.AcceleratorQuotaInterface
	managerBin string
	// promDir holds the prometheus and promtool binaries.
	promDir string
)

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{Kueue: true}, true, func(ctx context.Context, p *localcluster.TestPackage) (err error) {
		cluster, managerBin = p.Cluster, p.ManagerBin
		if aqs, err = quotaclient.AcceleratorQuotas(p.Cluster.Config); err != nil {
			return err
		}
		if err := p.Cluster.EnsureNamespaces(ctx, "ome", "ml-serving"); err != nil {
			return err
		}
		promDir, err = localcluster.EnsurePrometheus(ctx)
		return err
	}))
}
