package fleet

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/api/client/clientset/versioned"
	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

// member is the member cluster every test writes to, and aqs its
// AcceleratorQuotas.
var (
	member *localcluster.Cluster
	aqs    typed.AcceleratorQuotaInterface
)

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{}, false, func(_ context.Context, p *localcluster.TestPackage) error {
		member = p.Cluster
		aqs = versioned.NewForConfigOrDie(member.Config).OmeV1beta1().AcceleratorQuotas()
		return nil
	}))
}
