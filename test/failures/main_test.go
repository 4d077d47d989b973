package failures

import (
	"context"
	"os"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	// managerBin is the ome-quota-manager binary, built once for the package.
	managerBin string
)

// Kueue's controller is not needed: no namespace is enrolled, so the
// managers write nothing to Kueue; its CRDs are installed either way.
func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{Namespaces: []string{"ome"}}, true, func(_ context.Context, p *localcluster.TestPackage) error {
		cluster, managerBin = p.Cluster, p.ManagerBin
		return nil
	}))
}
