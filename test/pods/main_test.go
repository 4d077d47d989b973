package pods

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
)

func TestMain(m *testing.M) {
	opts := localcluster.Options{Kueue: true, KueuePods: true, Namespaces: []string{"ml-serving"}}
	os.Exit(localcluster.RunTests(m, opts, true, func(_ context.Context, p *localcluster.TestPackage) error {
		cluster, managerBin, aqs = p.Cluster, p.ManagerBin, p.AQs
		return nil
	}))
}
