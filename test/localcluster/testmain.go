package localcluster

import (
	"context"
	"fmt"
	"os"
)

// Main is the whole TestMain of a package that needs a control plane and
// nothing after its tests: it runs RunTests and exits with its code.
//
//	func TestMain(m *testing.M) {
//		localcluster.Main(m, localcluster.Options{Kueue: true}, true, setup)
//	}
func Main(m interface{ Run() int }, opts Options, withManager bool, setup func(context.Context, *Cluster) error) {
	os.Exit(RunTests(m, opts, withManager, setup))
}

// RunTests starts a control plane with opts (building the manager first
// when withManager, into the cluster's ManagerBin), runs setup, then the
// tests, and stops and removes everything whatever their outcome. It
// returns the exit code, for a TestMain with work of its own after the
// tests.
func RunTests(m interface{ Run() int }, opts Options, withManager bool, setup func(context.Context, *Cluster) error) int {
	ctx := context.Background()
	var bin string
	if withManager {
		dir, err := os.MkdirTemp("", "ome-manager-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if bin, err = BuildManager(ctx, dir); err != nil {
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
	c.ManagerBin = bin
	if err := c.EnsureNamespaces(ctx, opts.Namespaces...); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the test package:", err)
		return 1
	}
	if setup != nil {
		if err := setup(ctx, c); err != nil {
			fmt.Fprintln(os.Stderr, "setting up the test package:", err)
			return 1
		}
	}
	return m.Run()
}
