package pods

import (
	"context"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	opts := localcluster.Options{Kueue: true, KueuePods: true, Namespaces: []string{"ml-serving"}}
	localcluster.Main(m, opts, true, func(_ context.Context, c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}
