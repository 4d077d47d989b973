// Command localcluster starts the local control plane (etcd, kube-apiserver
// and, unless told not to, Kueue) in the foreground, prints how to reach it,
// and stops it and removes its files on Ctrl-C or SIGTERM.
//
//	go run ./test/cmd/localcluster up [--kueue=false] [--kubeconfig-out PATH] [--demo]
//	go run ./test/cmd/localcluster fleet
//	go run ./test/cmd/localcluster tools
//
// `up --demo` runs the guide on it: the ResourceFlavor a100, four fake A100
// nodes of 8 GPUs, the quota manager (built from this checkout), and the
// guide's tree, printing what the guide shows at each step. `fleet` (make
// demo-fleet) starts a management plane and two member clusters instead
// (fleet.go). `tools` only builds (or finds) the cached binaries and
// prints their folder.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"ome.io/quota-manager/test/localcluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: localcluster up [--kueue=false] [--kubeconfig-out PATH] [--demo] | localcluster fleet | localcluster tools")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	defer ownTerminal()()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "tools":
		dir, err := localcluster.EnsureBinaries(ctx)
		if err != nil {
			return err
		}
		fmt.Println(dir)
		return nil
	case "up":
	case "fleet":
		return upFleet(ctx, stop)
	default:
		return usage()
	}
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	withKueue := fs.Bool("kueue", true, "also run Kueue's controller manager")
	demo := fs.Bool("demo", false, "write the guide's ResourceFlavor a100 and four 8-GPU A100 nodes")
	out := fs.String("kubeconfig-out", "", "also write the kubeconfig here (default: .cache/localcluster/kubeconfig in the repository)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *out == "" {
		root, err := localcluster.RepoRoot()
		if err != nil {
			return err
		}
		*out = filepath.Join(root, ".cache", "localcluster", "kubeconfig")
	}

	fmt.Fprintln(os.Stderr, "starting etcd and kube-apiserver on loopback...")
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: *withKueue})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "\nstopping the local control plane...")
		err := c.Stop()
		_ = os.Remove(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stopping:", err)
			return
		}
		what := "etcd and kube-apiserver"
		if *withKueue {
			what += ", Kueue"
		}
		if *demo && *withKueue {
			what += ", ome-quota-manager"
		}
		fmt.Fprintf(os.Stderr, "stopped %s; removed %s (their data, certificates and logs) and %s\n", what, c.Dir, *out)
	}()
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, data, 0o600); err != nil {
		return err
	}
	if *demo {
		if err := localcluster.WriteDemoCluster(ctx, c); err != nil {
			return err
		}
		if *withKueue {
			m, err := runDemo(ctx, c)
			if m != nil {
				defer m.Stop() // before the control plane goes
			}
			if err != nil && ctx.Err() == nil {
				return err
			}
			if ctx.Err() != nil {
				return nil // Ctrl-C during the demo: a clean stop
			}
		}
	}
	fmt.Printf("\nThe local control plane is up%s.\n\n  export KUBECONFIG=%s\n  alias kubectl=%s\n\n",
		map[bool]string{true: " with Kueue", false: ""}[*withKueue], *out, filepath.Join(c.BinDir, "kubectl"))
	if *demo {
		fmt.Print("It holds the ResourceFlavor a100, four A100 nodes of 8 GPUs each, the quota manager\nand the guide's tree. Try, for example:\n\n  kubectl get aq\n  kubectl get aq team-beta -o yaml\n  kubectl get clusterqueues.kueue.x-k8s.io,localqueues.kueue.x-k8s.io -A\n  kubectl delete node gpu-node-4   # the mark falls to 24 within a minute\n\n")
	}
	fmt.Println("Press Ctrl-C to stop it; its files are removed then.")
	<-ctx.Done()
	stop() // a second Ctrl-C during the clean-up stops at once
	return nil
}

// upFleet runs the fleet demo until ctx ends, then stops it and removes
// its files.
func upFleet(ctx context.Context, stop func()) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, ".cache", "localcluster", "fleet")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	f, err := runFleet(ctx, dir)
	defer func() {
		fmt.Fprintln(os.Stderr, "\nstopping the fleet...")
		var dirs []string
		for _, c := range f.clusters {
			dirs = append(dirs, c.Dir)
		}
		serr := f.stop()
		rerr := os.RemoveAll(dir)
		if serr != nil || rerr != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stopping the fleet:", errors.Join(serr, rerr))
			return
		}
		fmt.Fprintf(os.Stderr, "stopped three control planes (etcd, kube-apiserver), Kueue on east and west, and the three ome-quota-managers; removed %s and %s\n",
			strings.Join(dirs, ", "), dir)
	}()
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while starting: a clean stop
		}
		return err
	}
	bin := filepath.Join(dir, "bin")
	fmt.Printf(`
The fleet is up: a management plane and two member clusters, east (two A100
nodes of 8 GPUs) and west (one), each its own etcd and kube-apiserver; Kueue
and a workload-mode ome-quota-manager on each member; the plane reaching them
through their ClusterProfiles and the secret-reader credential plugin. Its
tree: the Cohort research (24 GPUs), team-vision split Explicit (east 8,
west 2) and team-speech split Proportional to the members' capacity (12:
east 8, west 4).

  export KUBECONFIG=%s
  export PATH=%s:$PATH

Try, for example:

  kubectl --context plane get aq
  kubectl --context east get aq
  kubectl --context west get aq
  kubectl --context east get clusterqueues.kueue.x-k8s.io
  kubectl ome quota tree --context plane
  kubectl ome quota status team-speech --context plane
  kubectl --context west apply -f %s   # 8 more GPUs on west
  kubectl ome quota tree --context plane   # team-speech: east 6, west 6

`, filepath.Join(dir, "kubeconfig"), bin, filepath.Join(dir, "west-gpu-2.yaml"))
	fmt.Println("Press Ctrl-C to stop it; its files are removed then.")
	<-ctx.Done()
	stop() // a second Ctrl-C during the clean-up stops at once
	return nil
}
