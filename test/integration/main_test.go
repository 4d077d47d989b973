package integration

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/api/v1beta1/aqclient"
	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	aqs     *aqclient.Client
)

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{}, false, func(_ context.Context, p *localcluster.TestPackage) (err error) {
		cluster = p.Cluster
		aqs, err = aqclient.New(p.Cluster.Config)
		return err
	}))
}
