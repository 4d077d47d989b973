package helm

import (
	"context"
	"fmt"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	helmBin string
)

// Kueue's manager is not needed: the quota manager writes Kueue objects
// whose CRDs are installed either way, and no workload is admitted here.
func TestMain(m *testing.M) {
	localcluster.Main(m, localcluster.Options{Namespaces: []string{"ome", "ml-serving"}}, true, func(ctx context.Context, c *localcluster.Cluster) error {
		cluster = c
		var err error
		if helmBin, err = localcluster.EnsureHelm(ctx); err != nil {
			return err
		}
		// The chart installs the AdmissionLedger's CRD itself: the one the
		// local control plane installs from config/crd would fail Helm's
		// ownership check.
		if _, stderr, err := c.KubectlOutput(ctx, "delete", "crd", "admissionledgers.ome.io", "--wait"); err != nil {
			return fmt.Errorf("deleting the ledger's CRD: %v: %s", err, stderr)
		}
		// The guide's cluster: ResourceFlavor a100 and four A100 nodes of 8
		// GPUs, so the high-water mark is 32.
		return localcluster.WriteDemoCluster(ctx, c)
	})
}
