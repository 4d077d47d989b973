package localcluster

import (
	"context"
	"fmt"
	"os"

	quotaclient "ome.io/quota-manager/api/client"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
)

// TestPackage is what a test package's TestMain gets: its control plane and,
// when asked for, the manager binary built from this checkout.
type TestPackage struct {
	Cluster    *Cluster
	ManagerBin string
	// AQs is an AcceleratorQuota client on the cluster's admin identity.
	AQs aqtyped.AcceleratorQuotaInterface
}

// RunTests is the body of a TestMain for a package that needs a control
// plane: it starts one with opts (building the manager first when
// withManager), runs setup, then the tests, and stops and removes
// everything whatever their outcome. It returns the exit code:
//
//	func TestMain(m *testing.M) {
//		os.Exit(localcluster.RunTests(m, localcluster.Options{Kueue: true}, true, setup))
//	}
func RunTests(m interface{ Run() int }, opts Options, withManager bool, setup func(context.Context, *TestPackage) error) int {
	ctx := context.Background()
	p := &TestPackage{}
	if withManager {
		dir, err := os.MkdirTemp("", "ome-manager-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if p.ManagerBin, err = BuildManager(ctx, dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local control plane:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	p.Cluster = c
	if p.AQs, err = quotaclient.AcceleratorQuotas(c.Config); err == nil {
		err = c.EnsureNamespaces(ctx, opts.Namespaces...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "setting up the test package:", err)
		return 1
	}
	if setup != nil {
		if err := setup(ctx, p); err != nil {
			fmt.Fprintln(os.Stderr, "setting up the test package:", err)
			return 1
		}
	}
	return m.Run()
}
