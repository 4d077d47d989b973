package observability

import (
	"context"
	"os"
	"testing"

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
	opts := localcluster.Options{Kueue: true, Namespaces: []string{"ome", "ml-serving"}}
	os.Exit(localcluster.RunTests(m, opts, true, func(ctx context.Context, p *localcluster.TestPackage) (err error) {
		cluster, managerBin, aqs = p.Cluster, p.ManagerBin, p.AQs
		promDir, err = localcluster.EnsurePrometheus(ctx)
		return err
	}))
}
