package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

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
	apiProfile   = flag.String("apiprofile", "", "with -only match: save CPU profiles of kube-apiserver over the start of each run in PREFIX-bare.pprof and PREFIX-manager.pprof (-apiprofile-seconds)")
	bareWatch    = flag.Bool("bare-watch", false, "with -only match: the bare client's process also watches Cohorts, ClusterQueues and LocalQueues into informers during its run, as the manager does (to see what the manager's watches cost)")
	bareStatus   = flag.Bool("bare-status", false, "with -only match: the bare client also applies each node's status, as the manager does (to see what the manager's status writes cost)")
	freshRuns    = flag.Bool("fresh", true, "with -only match: the second run gets a fresh control plane, as in make perf; -fresh=false deletes the first run's objects instead and runs the second on the same API server")
	managerFirst = flag.Bool("manager-first", false, "with -only match: run the manager first and the bare client second, on the control plane the manager's run leaves")
	apiSeconds   = flag.String("apiprofile-seconds", "30,30", "with -apiprofile: the profiles' lengths in seconds, of the bare client's run and of the manager's")
	matchLimits  = flag.String("match-limits", "1000,2000,32", "with -only match: QPS,BURST,WORKERS of both runs (to see where the control plane, not the client limit, sets the pace)")
)

// apiRequests reads the API server's request counters, by verb, resource,
// subresource and code.
func (b *bench) apiRequests(ctx context.Context) (map[string]float64, error) {
	raw, err := b.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			// A few more of the API server's own counters, by their whole
			// series: watchers it closed for being slow, watch events by
			// kind, and its garbage collections.
			for _, family := range []string{"apiserver_terminated_watchers_total", "apiserver_watch_events_total", "go_gc_duration_seconds_count", "go_gc_duration_seconds_sum", "apiserver_watch_cache_events_dispatched_total"} {
				if strings.HasPrefix(line, family) {
					if i := strings.LastIndexByte(line, ' '); i > 0 {
						var v float64
						if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
							out[line[:i]] += v
						}
					}
				}
			}
			continue
		}
		end := strings.LastIndexByte(line, '}')
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(line[end+1:]), &v); err != nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(line[len("apiserver_request_total{"):end], ",") {
			k, val, ok := strings.Cut(kv, "=")
			if ok {
				labels[k] = strings.Trim(val, `"`)
			}
		}
		key := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		key += " " + labels["code"]
		out[key] += v
	}
	return out, nil
}

// logRequests logs what the API server served between two readings,
// largest first.
func logRequests(run string, before, after map[string]float64) {
	type row struct {
		key string
		n   float64
	}
	var rows []row
	for k, v := range after {
		if d := v - before[k]; d >= 1 || (d > 0 && strings.Contains(k, "seconds_sum")) {
			rows = append(rows, row{k, d})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.n - a.n) })
	for _, r := range rows {
		logf("  %s run, API server: %-40s %10.2f", run, r.key, r.n)
	}
}

// profileLengths are -apiprofile-seconds' two lengths, set by
// checkMatchFlags.
var profileLengths [2]int

// checkMatchFlags refuses the switches of -only match given without it,
// and a malformed -apiprofile-seconds, rather than ignore them.
func checkMatchFlags(only string) error {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if only != "match" {
		for _, name := range []string{"apiprofile", "apiprofile-seconds", "bare-watch", "bare-status", "fresh", "manager-first", "match-limits"} {
			if set[name] {
				return fmt.Errorf("-%s works with -only match alone: add -only match, or leave it out", name)
			}
		}
	}
	secs, err := positiveInts("apiprofile-seconds", *apiSeconds, "two lengths in seconds, the bare client's run's and the manager's, as in 44,58", 2)
	if err != nil {
		return err
	}
	limits, err := positiveInts("match-limits", *matchLimits, "QPS,BURST,WORKERS, three whole numbers, as in 300,600,32", 3)
	if err != nil {
		return err
	}
	profileLengths = [2]int(secs)
	matchQPS, matchBurst, matchWorkers = limits[0], limits[1], limits[2]
	return nil
}

// positiveInts reads the flag name's value as n whole numbers above 0,
// comma-separated; want says what the flag takes.
func positiveInts(name, value, want string, n int) ([]int, error) {
	parts := strings.Split(value, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("-%s %q: want %s", name, value, want)
	}
	out := make([]int, n)
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-%s %q: %q is not a whole number above 0", name, value, p)
		}
		out[i] = v
	}
	return out, nil
}

// saveProfile fetches who's CPU profile with fetch, in the background, and
// writes it to path; the returned function waits for it.
func saveProfile(who, path string, fetch func() ([]byte, error)) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		data, err := fetch()
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			logf("%s CPU profile: %v", who, err)
			return
		}
		logf("%s CPU profile in %s", who, path)
	}()
	return func() { <-done }
}

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
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name] - before[name]
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d.Microseconds())/1000/float64(max(objects, 1))))
	}
	total := cpuTotal(before, after)
	return fmt.Sprintf("total %.2f ms/object (%s)", float64(total.Microseconds())/1000/float64(max(objects, 1)), strings.Join(parts, ", "))
}

// cpuTotal is what all the processes spent between two readings.
func cpuTotal(before, after map[string]time.Duration) time.Duration {
	var total time.Duration
	for name, d := range after {
		total += d - before[name]
	}
	return total
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
		return saveProfile("manager", cpuProfile, func() ([]byte, error) { return m.CPUProfile(ctx, seconds) })
	}
	switch pass {
	case "match":
		var bare time.Duration
		var c0, c1, c2, c3 map[string]time.Duration
		var u0, u1, u2, u3 int64
		runBare := func() error {
			pids := b.processes()
			logf("bare client: %d Kueue objects, %d workers, QPS %d, burst %d...", nObjects, matchWorkers, matchQPS, matchBurst)
			r0, _ := b.apiRequests(ctx)
			waitAPI := func() {}
			if *apiProfile != "" {
				waitAPI = saveProfile("kube-apiserver", *apiProfile+"-bare.pprof", func() ([]byte, error) { return b.c.APIServerCPUProfile(ctx, profileLengths[0]) })
			}
			stopWatch := make(chan struct{})
			if *bareWatch {
				kf := kueueinformers.NewSharedInformerFactory(kueueclient.NewForConfigOrDie(b.cfg), 0)
				kq := kf.Kueue().V1beta2()
				kq.Cohorts().Informer()
				kq.ClusterQueues().Informer()
				kq.LocalQueues().Informer()
				kf.Start(stopWatch)
				kf.WaitForCacheSync(stopWatch)
			}
			c0, u0 = localcluster.CPUTimes(pids), b.w.updates()
			var err error
			bare, err = b.bareApply(ctx, out)
			close(stopWatch)
			if err != nil {
				return err
			}
			c1, u1 = localcluster.CPUTimes(pids), b.w.updates()
			waitAPI()
			r1, _ := b.apiRequests(ctx)
			logRequests("bare", r0, r1)
			logf("bare client took %s", bare.Round(100*time.Millisecond))
			return nil
		}
		var match materialization
		runManager := func() error {
			pids := b.processes()
			logf("manager at matching limits...")
			r2, _ := b.apiRequests(ctx)
			c2, u2 = localcluster.CPUTimes(pids), b.w.updates()
			m, started, err := b.startMatched(ctx, "m-match", extra...)
			if err != nil {
				return err
			}
			mpids := maps.Clone(pids)
			mpids["manager"] = m.Pid()
			c2["manager"] = 0
			wait := withProfile(m, 30)
			waitAPI := func() {}
			if *apiProfile != "" {
				waitAPI = saveProfile("kube-apiserver", *apiProfile+"-manager.pprof", func() ([]byte, error) { return b.c.APIServerCPUProfile(ctx, profileLengths[1]) })
			}
			match, err = b.waitMaterialized(ctx, started, nObjects, len(all), 10*time.Minute)
			c3, u3 = localcluster.CPUTimes(mpids), b.w.updates()
			wait()
			waitAPI()
			r3, _ := b.apiRequests(ctx)
			logRequests("manager", r2, r3)
			m.Stop()
			keep(m)
			return err
		}
		first, second := runBare, runManager
		if *managerFirst {
			first, second = runManager, runBare
		}
		between := func() error { return b.fresh(ctx, all) }
		if !*freshRuns {
			between = func() error { return b.reset(ctx) }
		}
		b.quiesce(ctx)
		if err := first(); err != nil {
			return err
		}
		if err := between(); err != nil {
			return err
		}
		if err := second(); err != nil {
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
