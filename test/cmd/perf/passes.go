package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/test/localcluster"
)

// The -only forms run one pass of the full measurement, for working on it
// (a few minutes instead of the whole run):
//
//	-only match   the bare client, then the manager at the matching limits,
//	              with the CPU each process spent per object in each
//	-only admin   the manager at the default limits with the admin
//	              changes during the bulk pass
//
// -cpuprofile FILE saves a CPU profile of the manager over the first 30 s
// of its pass at matching limits (the manager runs with --profiling).

var (
	verboseTries = flag.Bool("log-tries", false, "log each admin change's team and latency")
	keepLog      = flag.String("keep-log", "", "with -only: run the manager at -v=1 and copy its log to this file")
)

// processes are the control plane's processes whose CPU a write costs
// (etcd, kube-apiserver and Kueue), and this process (the bare client's,
// "perf").
func (b *bench) processes() map[string]int {
	out := b.c.Processes()
	out["perf"] = os.Getpid()
	return out
}

// cpuSpent is what each process spent between two readings, per object,
// as one cell: "etcd 1.2 ms, kube-apiserver 3.4 ms, ...".
func cpuSpent(before, after map[string]time.Duration, objects int) string {
	var parts []string
	var total time.Duration
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name] - before[name]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d.Microseconds())/1000/float64(max(objects, 1))))
	}
	return fmt.Sprintf("total %.2f ms/object (%s)", float64(total.Microseconds())/1000/float64(max(objects, 1)), strings.Join(parts, ", "))
}

// profile fetches a CPU profile of seconds from the manager into path.
func profile(ctx context.Context, m *localcluster.Manager, seconds int, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", m.MetricsPort, seconds), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// measureOnly runs the pass named by -only.
func (b *bench) measureOnly(ctx context.Context, pass, cpuProfile string) error {
	sh := b.sh
	all := b.tree(0, sh.cohorts)
	if err := b.createTree(ctx, all); err != nil {
		return err
	}
	out := b.desired(all)
	nObjects := len(out.Cohorts) + len(out.ClusterQueues) + len(out.LocalQueues)
	extra := []string{}
	if cpuProfile != "" {
		extra = append(extra, "--profiling")
	}
	if *keepLog != "" {
		extra = append(extra, "-v=1")
	}
	keep := func(m *localcluster.Manager) {
		if *keepLog == "" {
			return
		}
		if data, err := os.ReadFile(m.Log); err == nil {
			_ = os.WriteFile(*keepLog, data, 0o644)
		}
	}
	// withProfile profiles the manager from its readiness for seconds, in
	// the background; the returned function waits for the file.
	withProfile := func(m *localcluster.Manager, seconds int) func() {
		if cpuProfile == "" {
			return func() {}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := profile(ctx, m, seconds, cpuProfile); err != nil {
				logf("cpu profile: %v", err)
			} else {
				logf("cpu profile of %d s in %s", seconds, cpuProfile)
			}
		}()
		return func() { <-done }
	}
	switch pass {
	case "match":
		pids := b.processes()
		logf("bare client: %d Kueue objects, %d workers, QPS %d, burst %d...", nObjects, matchWorkers, matchQPS, matchBurst)
		c0, u0 := localcluster.CPUTimes(pids), b.w.updates()
		bare, err := b.bareApply(ctx, out)
		if err != nil {
			return err
		}
		c1, u1 := localcluster.CPUTimes(pids), b.w.updates()
		logf("bare client took %s", bare.Round(100*time.Millisecond))
		if err := b.reset(ctx); err != nil {
			return err
		}
		logf("manager at matching limits...")
		c2, u2 := localcluster.CPUTimes(pids), b.w.updates()
		m, started, err := b.startManager(ctx, "m-match", matchQPS, matchBurst, matchWorkers, append(extra, "--capacity-report-interval=0s", "--resync-interval=1h")...)
		if err != nil {
			return err
		}
		pids["manager"] = m.Pid()
		c2["manager"] = 0
		wait := withProfile(m, 30)
		match, err := b.waitMaterialized(ctx, started, nObjects, len(all), 10*time.Minute)
		c3, u3 := localcluster.CPUTimes(pids), b.w.updates()
		wait()
		m.Stop()
		keep(m)
		if err != nil {
			return err
		}
		b.t.add(fmt.Sprintf("time to all %d objects, matching limits (QPS %d, burst %d, %d workers)", nObjects, matchQPS, matchBurst, matchWorkers), secs(match.objects), secs(bare)+" bare client", ratio(match.objects.Seconds(), bare.Seconds()))
		b.t.add("time to all nodes Materialized, matching limits", secs(match.allMaterialized), secs(bare)+" bare client", ratio(match.allMaterialized.Seconds(), bare.Seconds()))
		b.t.add("time to the first team Materialized, matching limits", secs(match.firstTeam), "-", "-")
		b.t.add("CPU per object (manager run from launch to all Materialized; bare run)", cpuSpent(c2, c3, nObjects), cpuSpent(c0, c1, nObjects), "-")
		b.t.add("ClusterQueue and LocalQueue updates seen during the run (Kueue's status writes)", fmt.Sprint(u3-u2), fmt.Sprint(u1-u0), ratio(float64(u3-u2), float64(u1-u0)))
	case "admin":
		m, def, latencies, err := b.defaultPass(ctx, nObjects, len(all), extra...)
		if err != nil {
			return err
		}
		m.Stop()
		keep(m)
		d := manager.DefaultOptions()
		allowed := time.Duration(float64(max(nObjects-d.KubeAPIBurst, 0)) / float64(d.KubeAPIQPS) * float64(time.Second))
		b.t.add(fmt.Sprintf("time to all objects, default limits (QPS %g, burst %d, %d workers)", d.KubeAPIQPS, d.KubeAPIBurst, d.ApplyWorkers), secs(def.objects), secs(allowed)+" (objects-burst)/QPS", ratio(def.objects.Seconds(), allowed.Seconds()))
		b.t.add("time to the first team Materialized, default limits", secs(def.firstTeam), "-", "-")
		if len(latencies) > 0 {
			slices.Sort(latencies)
			b.t.add(fmt.Sprintf("admin budget change to its ClusterQueue during the bulk pass (%d tries)", len(latencies)),
				fmt.Sprintf("p50 %s, p99 %s", pct(latencies, 50), pct(latencies, 99)), fmt.Sprint(latencies), "-")
		}
	default:
		return fmt.Errorf("-only %q: want match or admin", pass)
	}
	return nil
}

// updates counts the ClusterQueue and LocalQueue updates seen.
func (w *watcher) updates() int64 { return w.cqUpdates.Load() + w.lqUpdates.Load() }
