package integration

import (
	"context"
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
	localcluster.Main(m, localcluster.Options{}, false, func(_ context.Context, c *localcluster.Cluster) (err error) {
		cluster, aqs = c, c.AQs
		quotas, err = versioned.NewForConfig(c.Config)
		return err
	})
}
