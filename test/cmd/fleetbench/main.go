// Command fleetbench measures a management plane with live member
// clusters on loopback: a hub running the plane, and member API servers,
// each with GPU Nodes and (by default) a workload-mode manager that turns
// the plane's copies into Kueue ClusterQueues. The members' API servers
// share the hub's etcd, each under an etcd prefix of its own, so that 20 of
// them fit two cores. For each fleet size it measures:
//
//   - a fleet budget change (one team's budget raised, then lowered) until
//     every member's copy, and every ClusterQueue made from it, holds the
//     new share;
//
//   - a member's capacity change (a Node added on one member, then
//     removed) until every member's copies, and their ClusterQueues, hold
//     the new Proportional split: the other members lowered first, then the
//     one that grew raised once their lowers are read back (and the other
//     way round when the Node goes);
//
//   - the plane's RSS and Go heap once the fleet is in place, its CPU while
//     idle, and its CPU per change.
//
// Run it as:
//
//	go run ./test/cmd/fleetbench                          # 20 members; sizes 5, 10, 20; 10 changes of each kind per size
//	go run ./test/cmd/fleetbench -sizes 20 -rounds 20     # one size, more changes
//	go run ./test/cmd/fleetbench -members 4 -sizes 2,4 -rounds 2   # a quick check, about 2 minutes
//
// `make fleet-bench` runs the first. Like test/cmd/perf it is not a
// timed test: it fails only when a step cannot complete. Every process it
// starts is stopped when it ends, fails or is interrupted, and dies with it
// if it is killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

// config is what the flags ask for.
type config struct {
	members  int   // member API servers started
	managers int   // of them, how many run a workload-mode manager
	sizes    []int // fleet sizes measured, each a plane of its own over the first n members
	rounds   int   // changes of each kind per size
	teams    int   // Proportional teams in the fleet tree
	gpus     int   // GPUs of each member's Node, and of the Node a capacity change adds
	keepLogs bool
	// planeArgs are extra flags of the plane (e.g. --event-log=DIR, -v=2).
	planeArgs []string
}

func run() error {
	var c config
	var sizes string
	flag.IntVar(&c.members, "members", 20, "member API servers to start (sharing one etcd)")
	flag.IntVar(&c.managers, "managers", -1, "how many members run a workload-mode manager (the first ones); -1: all")
	flag.StringVar(&sizes, "sizes", "5,10,20", "fleet sizes to measure, each at most -members: a plane of its own over the first n members")
	flag.IntVar(&c.rounds, "rounds", 10, "changes of each kind per size (half raise or add, half lower or remove)")
	flag.IntVar(&c.teams, "teams", 10, "Proportional teams in the fleet tree")
	flag.IntVar(&c.gpus, "gpus", 256, "GPUs of each member's Node")
	flag.BoolVar(&c.keepLogs, "keep-logs", false, "keep the folder of the managers' logs")
	planeArgs := flag.String("plane-args", "", "extra flags of the plane, space-separated (e.g. \"-v=2\"); with -keep-logs, --event-log=DIR keeps each size's event log in DIR-N")
	flag.Parse()
	c.planeArgs = strings.Fields(*planeArgs)
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > c.members {
			return fmt.Errorf("-sizes %q: each size is a number from 1 to -members (%d)", sizes, c.members)
		}
		c.sizes = append(c.sizes, n)
	}
	slices.Sort(c.sizes)
	if c.managers < 0 || c.managers > c.members {
		c.managers = c.members
	}
	// Each change is undone by the next: an even number of each.
	c.rounds = max(2, c.rounds+c.rounds%2)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	load0 := loadNow()

	f, err := startFleet(ctx, c)
	if f != nil {
		defer f.stop()
	}
	if err != nil {
		return err
	}
	var results []*sizeResult
	for _, n := range c.sizes {
		r, err := f.measure(ctx, n)
		if err != nil {
			return fmt.Errorf("%d members: %w", n, err)
		}
		results = append(results, r)
	}
	fmt.Printf("\n%d member API servers on one etcd, %d with a workload manager; %d Proportional teams; %d changes of each kind per size; GOMAXPROCS %d; load average %s at start, %s at end; took %s\n\n",
		c.members, c.managers, c.teams, c.rounds, runtime.GOMAXPROCS(0), load0, loadNow(), time.Since(start).Round(time.Second))
	printResults(c, results)
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func loadNow() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		return strings.Fields(string(b))[0]
	}
	return "?"
}
