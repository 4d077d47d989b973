package fleet

import (
	"context"
	"os"
	"testing"

	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

// member is the member cluster every test writes to (with Kueue's
// controller manager, which admits workloads against the copies), aqs its
// AcceleratorQuotas, and managerBin the manager's binary.
var (
	member     *localcluster.Cluster
	aqs        typed.AcceleratorQuotaInterface
	managerBin string
)

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{Kueue: true}, true, func(_ context.Context, p *localcluster.TestPackage) error {
		member, managerBin, aqs = p.Cluster, p.ManagerBin, p.AQs
		return nil
	}))
}
