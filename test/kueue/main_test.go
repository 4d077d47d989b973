package kueue

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{Kueue: true}, false, func(_ context.Context, p *localcluster.TestPackage) error {
		cluster = p.Cluster
		return nil
	}))
}
