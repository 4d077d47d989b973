// Command perf measures the manager's materialization on the local control
// plane (etcd, kube-apiserver and Kueue on loopback) against a bare client
// writing the same Kueue objects, and prints one table of figures and
// ratios, all measured in the same run:
//
//	go run ./test/cmd/perf            # T21k: 51 Cohorts, 1,000 ClusterQueues, 20,000 LocalQueues, 250 then 10,000 Nodes
//	go run ./test/cmd/perf -quick     # a small tree (times: docs/performance.md)
//	go run ./test/cmd/perf -rss       # only the RSS rows: T21k, 250 then 10,000 Nodes, a few minutes
//
// `make perf` runs the first, `make perf QUICK=1` the second; `make test`
// runs the quick form once to keep the command working. It is not a timed
// test: it asserts nothing about durations, and fails only when a step
// cannot complete (a manager that never materializes, say).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/test/localcluster"
)

// shape is a tree and a cluster to measure.
type shape struct {
	cohorts, teamsPerCohort, namespaces int
	// small is the number of Cohorts of the first, smaller tree (for the
	// CPU per ClusterQueue status update at two sizes).
	small       int
	nodes, more int // GPU Nodes, and the Nodes of the large variant
	updates     int // ClusterQueue status updates per CPU measurement
	tries       int // admin changes during the bulk pass
	// rounds is how many times the bare client and the manager each
	// materialize the tree at matching limits, in turn, each on a fresh
	// control plane. The quick form runs one: it keeps the command
	// working, and its figures are not compared.
	rounds int
}

var (
	full  = shape{cohorts: 50, teamsPerCohort: 20, namespaces: 20, small: 5, nodes: 250, more: 10000, updates: 400, tries: 20, rounds: 2}
	quick = shape{cohorts: 4, teamsPerCohort: 10, namespaces: 3, small: 1, nodes: 20, more: 200, updates: 60, tries: 5, rounds: 1}
)

// Matching limits: the bare client's, and the manager's in the runs that
// compare with it. -only match can set others (-match-limits).
var (
	matchQPS, matchBurst, matchWorkers = 1000, 2000, 32
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "informer" {
		if err := bareInformer(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "perf informer:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "perf:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

type bench struct {
	sh      shape
	c       *localcluster.Cluster
	bin     string
	cfg     *rest.Config // high limits, for setting up
	kube    kubernetes.Interface
	kueue   kueueclient.Interface
	aqs     *versioned.Clientset
	nsNames []string
	w       *watcher
	t       table
	logDir  string
	// stopWatcher stops w's informers (fresh replaces the control plane).
	stopWatcher context.CancelFunc
}

func run() error {
	q := flag.Bool("quick", false, "a small tree, the check make test runs (its time: docs/performance.md)")
	cohorts := flag.Int("cohorts", 0, "Cohorts under root, instead of the tree's (20 teams each in the full tree)")
	rssOnly := flag.Bool("rss", false, "only the RSS rows (manager against bare informers, at both Node counts): a few minutes, for working on memory")
	only := flag.String("only", "", "only one pass: match (bare client, then the manager at matching limits, with CPU per object) or admin (default limits with the admin changes)")
	cpuProfile := flag.String("cpuprofile", "", "with -only: save a CPU profile of the manager during its pass in this file")
	flag.Parse()
	if err := checkMatchFlags(*only); err != nil {
		return err
	}
	sh := full
	if *q {
		sh = quick
	}
	if *cohorts > 0 {
		sh.cohorts = max(*cohorts, sh.small+1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var load1 string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load1 = strings.Fields(string(b))[0]
	}

	logf("starting etcd, kube-apiserver and Kueue on loopback...")
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true})
	if err != nil {
		return err
	}
	b := &bench{sh: sh, c: c}
	defer func() { _ = b.c.Stop() }()
	binDir, err := os.MkdirTemp("", "perf-manager-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	if b.bin, err = localcluster.BuildManager(ctx, binDir); err != nil {
		return err
	}
	if err := b.use(ctx, c); err != nil {
		return err
	}
	measure := b.measure
	if *rssOnly {
		measure = b.measureRSS
	}
	if *only != "" {
		measure = func(ctx context.Context) error { return b.measureOnly(ctx, *only, *cpuProfile) }
	}
	if err := measure(ctx); err != nil {
		return err
	}
	fmt.Printf("\nT%s: %d Cohorts, %d ClusterQueues, %d LocalQueues (%d namespaces), %d GPU Nodes (%d in the large variant); GOMAXPROCS %d, load average %s at start, %s at end; took %s\n\n",
		map[bool]string{true: "quick", false: "21k"}[*q], sh.cohorts+1, sh.cohorts*sh.teamsPerCohort, sh.cohorts*sh.teamsPerCohort*sh.namespaces, sh.namespaces,
		sh.nodes, sh.more, runtime.GOMAXPROCS(0), load1, loadNow(), time.Since(start).Round(time.Second))
	b.t.print()
	return nil
}

func loadNow() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		return strings.Fields(string(b))[0]
	}
	return "?"
}
