package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ome.io/quota-manager/api/v1beta1/aqclient"
	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	aqs     *aqclient.Client
	// managerBin is the ome-quota-manager binary, built once for the package.
	managerBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	bindir, err := os.MkdirTemp("", "ome-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bindir)
	if managerBin, err = localcluster.BuildManager(ctx, bindir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local control plane with Kueue:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	cluster = c
	if aqs, err = aqclient.New(c.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, ns := range []string{"ome", "ml-serving"} {
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}
