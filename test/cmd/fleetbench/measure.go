package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/localcluster"
)

// change is one measured change: how long until the members held its
// split, the plane's CPU for it (its idle CPU over the same time taken
// off), and the events the plane applied for it.
type change struct {
	reached
	cpu    time.Duration
	events float64
}

// kinds of change, in the order they are printed.
var kinds = []string{"budget raised", "budget lowered", "Node added", "Node removed"}

// sizeResult is what one fleet size measured.
type sizeResult struct {
	n          int
	load       [2]string // load average at the start and end of the size
	first      reached   // the tree created, until every member held it
	changes    map[string][]change
	rss, heap  int64
	idlePerSec time.Duration // the plane's CPU per second, idle
}

// settleAfter is how long the bench waits after a change reached every
// member before the next one, so that what trails it (statuses, the
// members' reports) lands in its own change's CPU.
const settleAfter = 2 * time.Second

// measure runs one fleet size: a plane over the first n members, the
// tree, the changes, and the tree's deletion.
func (f *fleet) measure(ctx context.Context, n int) (*sizeResult, error) {
	r := &sizeResult{n: n, changes: map[string][]change{}}
	r.load[0] = loadNow()
	logf("%d members: starting the plane (load average %s)...", n, r.load[0])
	plane, err := f.startPlane(ctx, n)
	if err != nil {
		return nil, err
	}
	defer plane.Stop()
	fail := func(err error) (*sizeResult, error) {
		return nil, fmt.Errorf("%w\n--- last lines of the plane's log ---\n%s", err, plane.Tail(30))
	}
	start := time.Now()
	if err := f.createTree(ctx, n); err != nil {
		return fail(err)
	}
	if r.first, err = f.waitSplit(ctx, start, f.even(n, -1, 0), 5*time.Minute); err != nil {
		return fail(err)
	}
	logf("%d members: the tree reached every member in %s (copies %s)", n, r.first.cqs.Round(time.Millisecond), r.first.copies.Round(time.Millisecond))

	// Memory and idle CPU, once the fleet is in place.
	time.Sleep(5 * time.Second)
	if r.rss, err = localcluster.RSS(plane.Pid()); err != nil {
		return fail(err)
	}
	heap, err := plane.Metric(ctx, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return fail(err)
	}
	r.heap = int64(heap)
	c0, _ := localcluster.CPUTime(plane.Pid())
	const idle = 10 * time.Second
	time.Sleep(idle)
	c1, _ := localcluster.CPUTime(plane.Pid())
	r.idlePerSec = (c1 - c0) * time.Second / idle

	// One change: do it, wait for want, let it settle, and count.
	measureOne := func(kind string, round int, do func() error, want split) error {
		cpu0, _ := localcluster.CPUTime(plane.Pid())
		ev0, _ := plane.Metric(ctx, "ome_quota_events_total")
		t := time.Now()
		if err := do(); err != nil {
			return err
		}
		got, err := f.waitSplit(ctx, t, want, time.Minute)
		if err != nil {
			return fmt.Errorf("%s (round %d): %w", kind, round, err)
		}
		time.Sleep(settleAfter)
		cpu1, _ := localcluster.CPUTime(plane.Pid())
		ev1, _ := plane.Metric(ctx, "ome_quota_events_total")
		window := time.Since(t)
		c := change{reached: got, cpu: max(0, cpu1-cpu0-r.idlePerSec*window/time.Second), events: ev1 - ev0}
		r.changes[kind] = append(r.changes[kind], c)
		logf("%d members, %s #%d: copies %s, ClusterQueues %s, plane CPU %s, %v events (load %s)",
			n, kind, round, got.copies.Round(time.Millisecond), got.cqs.Round(time.Millisecond), c.cpu, c.events, loadNow())
		return nil
	}

	// A fleet budget change: team-00 raised by n GPUs (one more on each
	// member), then lowered back.
	for round := range f.cfg.rounds {
		kind, total, extra := "budget raised", budget(n)+n, 1
		if round%2 == 1 {
			kind, total, extra = "budget lowered", budget(n), 0
		}
		if err := measureOne(kind, round, func() error { return f.setBudget(ctx, teamName(0), total) }, f.even(n, -1, extra)); err != nil {
			return fail(err)
		}
	}
	// A member's capacity change: a Node as large as its first added on
	// one member (its mark doubles: 2n of each team there, n on each other
	// member, lowered first), then removed (n+1 everywhere again).
	for round := range f.cfg.rounds {
		m := f.members[(round/2)%n]
		if round%2 == 0 {
			err = measureOne("Node added", round, func() error {
				_, err := localcluster.ApplyNode(ctx, m.c.Kube, localcluster.GPUNode("gpu-extra", f.cfg.gpus))
				return err
			}, f.even(n, (round/2)%n, 0))
		} else {
			err = measureOne("Node removed", round, func() error {
				err := m.c.Kube.CoreV1().Nodes().Delete(ctx, "gpu-extra", metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}, f.even(n, -1, 0))
		}
		if err != nil {
			return fail(err)
		}
	}
	logf("%d members: deleting the tree...", n)
	if err := f.deleteTree(ctx, n); err != nil {
		return fail(err)
	}
	r.load[1] = loadNow()
	return r, nil
}

// even is the split of every team over the first n members: n+1 each
// (team-00 extra more); with grown >= 0, that member's capacity doubled:
// 2n there and n on each other member.
func (f *fleet) even(n, grown, extra int) split {
	want := make(split, n)
	for i := range n {
		want[i] = map[string]int64{}
		for t := range f.cfg.teams {
			share := int64(n + 1)
			switch {
			case grown == i:
				share = int64(2 * n)
			case grown >= 0:
				share = int64(n)
			case t == 0:
				share += int64(extra)
			}
			want[i][teamName(t)] = share
		}
	}
	return want
}

// median and the range of durations.
func spread(ds []time.Duration) (med, lo, hi time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0, 0
	}
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return med, s[0], s[len(s)-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// spreadText is "median (min to max)" in milliseconds.
func spreadText(ds []time.Duration) string {
	med, lo, hi := spread(ds)
	return fmt.Sprintf("%s ms (%s to %s)", ms(med), ms(lo), ms(hi))
}

func printResults(c config, results []*sizeResult) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(w, "measure")
	for _, r := range results {
		fmt.Fprintf(w, "\t%d members", r.n)
	}
	fmt.Fprintln(w)
	row := func(what string, cell func(r *sizeResult) string) {
		fmt.Fprint(w, what)
		for _, r := range results {
			fmt.Fprint(w, "\t"+cell(r))
		}
		fmt.Fprintln(w)
	}
	row("load average at start, end", func(r *sizeResult) string { return r.load[0] + ", " + r.load[1] })
	row("tree created, until every ClusterQueue", func(r *sizeResult) string { return ms(r.first.cqs) + " ms" })
	for _, kind := range kinds {
		pick := func(f func(change) time.Duration) func(r *sizeResult) string {
			return func(r *sizeResult) string {
				var ds []time.Duration
				for _, ch := range r.changes[kind] {
					ds = append(ds, f(ch))
				}
				return spreadText(ds)
			}
		}
		row(kind+": every copy", pick(func(ch change) time.Duration { return ch.copies }))
		row(kind+": every ClusterQueue", pick(func(ch change) time.Duration { return ch.cqs }))
		row(kind+": plane CPU", pick(func(ch change) time.Duration { return ch.cpu }))
		row(kind+": plane events", func(r *sizeResult) string {
			var es []time.Duration
			for _, ch := range r.changes[kind] {
				es = append(es, time.Duration(ch.events))
			}
			med, lo, hi := spread(es)
			return fmt.Sprintf("%d (%d to %d)", med, lo, hi)
		})
	}
	row("plane RSS (Go heap in use)", func(r *sizeResult) string { return mib(r.rss) + " (" + mib(r.heap) + ")" })
	row("plane CPU while idle", func(r *sizeResult) string { return ms(r.idlePerSec) + " ms/s" })
	_ = w.Flush()
	if len(results) > 1 {
		a, b := results[0], results[len(results)-1]
		dn := float64(b.n - a.n)
		fmt.Printf("\nper member, from %d to %d members: RSS %+.2f MiB, Go heap %+.2f MiB, idle CPU %+.2f ms/s\n",
			a.n, b.n, float64(b.rss-a.rss)/(1<<20)/dn, float64(b.heap-a.heap)/(1<<20)/dn, float64(b.idlePerSec-a.idlePerSec)/float64(time.Millisecond)/dn)
	}
}
