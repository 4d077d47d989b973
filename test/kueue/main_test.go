package kueue

import (
	"context"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, localcluster.Options{Kueue: true}, false, func(_ context.Context, c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}
