package failures

import (
	"context"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

// Kueue's controller is not needed: no namespace is enrolled, so the
// managers write nothing to Kueue; its CRDs are installed either way.
func TestMain(m *testing.M) {
	localcluster.Main(m, localcluster.Options{Namespaces: []string{"ome"}}, true, func(_ context.Context, c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}
