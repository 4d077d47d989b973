package integration

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	quotas  versioned.Interface
	aqs     aqtyped.AcceleratorQuotaInterface
)

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{}, false, func(_ context.Context, p *localcluster.TestPackage) (err error) {
		cluster = p.Cluster
		if quotas, err = versioned.NewForConfig(p.Cluster.Config); err != nil {
			return err
		}
		aqs = quotas.OmeV1beta1().AcceleratorQuotas()
		return nil
	}))
}
