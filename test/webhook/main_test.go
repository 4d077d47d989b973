package webhook

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	// managerBin is the ome-quota-manager binary, built once for the package.
	managerBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	bindir, err := os.MkdirTemp("", "ome-webhook-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bindir)
	if managerBin, err = localcluster.BuildManager(ctx, bindir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Kueue's manager is not needed: the webhook reads ResourceFlavors,
	// whose CRD is installed either way, and no namespace is enrolled, so
	// the manager writes nothing to Kueue.
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local control plane:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	cluster = c
	if err := c.EnsureNamespace(ctx, "ome"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The guide's cluster: ResourceFlavor a100 and four A100 nodes of 8
	// GPUs, so the high-water mark is 32.
	if err := localcluster.WriteDemoCluster(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
