package fleet

import (
	"context"
	"testing"

	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

// member is the member cluster every test writes to (with Kueue's
// controller manager, which admits workloads against the copies), and aqs
// its AcceleratorQuotas.
var (
	member *localcluster.Cluster
	aqs    typed.AcceleratorQuotaInterface
)

func TestMain(m *testing.M) {
	localcluster.Main(m, localcluster.Options{Kueue: true}, true, func(_ context.Context, c *localcluster.Cluster) error {
		member, aqs = c, c.AQs
		return nil
	})
}
