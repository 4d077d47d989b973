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
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqinformers "ome.io/quota-manager/api/client/informers/externalversions"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
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
}

var (
	full  = shape{cohorts: 50, teamsPerCohort: 20, namespaces: 20, small: 5, nodes: 250, more: 10000, updates: 400, tries: 20}
	quick = shape{cohorts: 4, teamsPerCohort: 10, namespaces: 3, small: 1, nodes: 20, more: 200, updates: 60, tries: 5}
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

type table struct {
	rows [][4]string
}

func (t *table) add(what, manager, anchor, ratio string) {
	t.rows = append(t.rows, [4]string{what, manager, anchor, ratio})
}

func (t *table) print() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "measure\tmanager\tanchor\tratio")
	for _, r := range t.rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r[0], r[1], r[2], r[3])
	}
	_ = w.Flush()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// matchRounds is how many times the bare client and the manager each
// materialize the tree at matching limits, in turn.
const matchRounds = 2

// runs lists durations in seconds: "54.8, 68.4".
func runs(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.1f", d.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// best is the index of the fastest bare run, and of the manager's run that
// materialized every node soonest.
func best(bares []time.Duration, matches []materialization) (bareAt, matchAt int) {
	bareAt = slices.Index(bares, slices.Min(bares))
	for i, x := range matches {
		if x.allMaterialized < matches[matchAt].allMaterialized {
			matchAt = i
		}
	}
	return bareAt, matchAt
}

// worst is the latest first team Materialized over the runs: the bound
// on it holds in every run, not only the best.
func worst(matches []materialization) time.Duration {
	var w time.Duration
	for _, m := range matches {
		w = max(w, m.firstTeam)
	}
	return w
}
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
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

// use makes c the control plane the bench works on: its clients, the
// ResourceFlavor, the namespaces, the Nodes and the watcher.
func (b *bench) use(ctx context.Context, c *localcluster.Cluster) error {
	b.c, b.logDir = c, c.Dir
	b.cfg = rest.CopyConfig(c.Config)
	b.cfg.QPS, b.cfg.Burst = 2000, 4000
	b.kube = kubernetes.NewForConfigOrDie(b.cfg)
	b.kueue = kueueclient.NewForConfigOrDie(b.cfg)
	b.aqs = versioned.NewForConfigOrDie(b.cfg)
	b.nsNames = nil
	return b.setup(ctx)
}

// fresh replaces the control plane with a new one holding the Nodes and
// the tree aqs, so that a run starts where every other run starts: an API
// server that has just started, not one that has just written and deleted
// 21,000 objects (see docs/performance.md on why that matters).
func (b *bench) fresh(ctx context.Context, aqs []*v1beta1.AcceleratorQuota) error {
	b.stopWatcher()
	_ = b.c.Stop()
	logf("a fresh control plane for the next run...")
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true})
	if err != nil {
		return err
	}
	if err := b.use(ctx, c); err != nil {
		return err
	}
	if err := b.createTree(ctx, aqs); err != nil {
		return err
	}
	b.quiesce(ctx)
	return nil
}

func (b *bench) setup(ctx context.Context) error {
	if _, err := b.kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range b.sh.namespaces {
		ns := fmt.Sprintf("team-ns-%02d", i)
		b.nsNames = append(b.nsNames, ns)
		if err := b.c.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	logf("writing %d GPU Nodes...", b.sh.nodes)
	if err := b.writeNodes(ctx, 0, b.sh.nodes); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	b.w, b.stopWatcher = newWatcher(wctx, b.cfg), cancel
	return nil
}

// gpusPerNode and the budgets: every team 2 GPUs, every Cohort its teams'
// sum, all within the Nodes' capacity.
const gpusPerNode = 8

func (b *bench) writeNodes(ctx context.Context, from, to int) error {
	return parallel(ctx, to-from, 32, func(i int) error {
		n := localcluster.GPUNode(fmt.Sprintf("gpu-%05d", from+i), gpusPerNode)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}}
		created, err := b.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		q := resource.MustParse(strconv.Itoa(gpusPerNode))
		rl := corev1.ResourceList{"nvidia.com/gpu": q, corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
		created.Status = corev1.NodeStatus{Capacity: rl, Allocatable: rl, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		_, err = b.kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

func parallel(ctx context.Context, n, workers int, f func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range min(workers, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func cohortName(c int) string  { return fmt.Sprintf("c-%02d", c) }
func teamName(c, t int) string { return fmt.Sprintf("t-%02d-%02d", c, t) }

// tree is the AcceleratorQuotas of Cohorts [from, to), with root when from
// is 0.
func (b *bench) tree(from, to int) []*v1beta1.AcceleratorQuota {
	var out []*v1beta1.AcceleratorQuota
	if from == 0 {
		out = append(out, aqtest.Root().Obj())
	}
	for c := from; c < to; c++ {
		out = append(out, aqtest.Cohort(cohortName(c), "root").Budget("nvidia.com/gpu", "a100", strconv.Itoa(2*b.sh.teamsPerCohort)).Obj())
		for t := range b.sh.teamsPerCohort {
			out = append(out, aqtest.Team(teamName(c, t), cohortName(c)).Budget("nvidia.com/gpu", "a100", "2").Obj())
		}
	}
	return out
}

func (b *bench) createTree(ctx context.Context, aqs []*v1beta1.AcceleratorQuota) error {
	// Parents first: Cohorts, then teams.
	var cohorts, teams []*v1beta1.AcceleratorQuota
	for _, a := range aqs {
		if a.Spec.Role == v1beta1.RoleCohort {
			cohorts = append(cohorts, a)
		} else {
			teams = append(teams, a)
		}
	}
	for _, set := range [][]*v1beta1.AcceleratorQuota{cohorts, teams} {
		if err := parallel(ctx, len(set), 32, func(i int) error {
			_, err := b.aqs.OmeV1beta1().AcceleratorQuotas().Create(ctx, set[i], metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// desired is the Kueue objects of a tree, as the manager projects them.
func (b *bench) desired(aqs []*v1beta1.AcceleratorQuota) *projector.Output {
	in := projector.Input{EnrolledNamespaces: b.nsNames, CoverResources: projector.DefaultCoverResources()}
	for _, a := range aqs {
		parent := ""
		if a.Spec.ParentRef != nil {
			parent = a.Spec.ParentRef.Name
		}
		in.Nodes = append(in.Nodes, projector.Node{Name: a.Name, Role: a.Spec.Role, Parent: parent, Budgets: a.Spec.Budgets, Ready: true})
	}
	return projector.Project(in)
}

func (b *bench) startManager(ctx context.Context, name string, qps float64, burst, workers int, extra ...string) (*localcluster.Manager, time.Time, error) {
	args := append([]string{
		"--enrolled-namespaces=" + strings.Join(b.nsNames, ","),
		"--webhook=false", "--leader-elect=false",
		fmt.Sprintf("--kube-api-qps=%g", qps), fmt.Sprintf("--kube-api-burst=%d", burst), fmt.Sprintf("--apply-workers=%d", workers),
	}, extra...)
	started := time.Now()
	m, err := b.c.LaunchManager(ctx, b.bin, name, b.logDir, args...)
	if err != nil {
		return nil, started, err
	}
	if err := m.WaitReady(ctx, 3*time.Minute); err != nil {
		m.Kill()
		return nil, started, err
	}
	return m, started, nil
}

// startMatched starts the manager at the matching limits, without ticks or
// resyncs: the runs compared with the bare client, and the RSS readings.
func (b *bench) startMatched(ctx context.Context, name string, extra ...string) (*localcluster.Manager, time.Time, error) {
	return b.startManager(ctx, name, float64(matchQPS), matchBurst, matchWorkers, append(extra, "--capacity-report-interval=0s", "--resync-interval=1h")...)
}

// materialization is what one manager run took, from its launch.
type materialization struct {
	objects, firstTeam, allMaterialized time.Duration
}

func (b *bench) waitMaterialized(ctx context.Context, started time.Time, objects, nodes int, timeout time.Duration) (materialization, error) {
	var out materialization
	deadline := time.Now().Add(timeout)
	for {
		o, first, all := b.w.progress(objects, nodes)
		if out.objects == 0 && !o.IsZero() {
			out.objects = o.Sub(started)
		}
		if out.firstTeam == 0 && !first.IsZero() {
			out.firstTeam = first.Sub(started)
		}
		if !all.IsZero() {
			out.allMaterialized = all.Sub(started)
		}
		if out.objects > 0 && out.allMaterialized > 0 {
			return out, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return out, fmt.Errorf("not materialized after %s: %d of %d managed objects, %d of %d nodes Materialized", timeout, b.w.objects(), objects, b.w.materialized(), nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reset deletes the managed Kueue objects and clears the nodes' statuses,
// so that the next run starts from nothing.
func (b *bench) reset(ctx context.Context) error {
	logf("deleting the Kueue objects and clearing the statuses...")
	kq := b.kueue.KueueV1beta2()
	sel := metav1.ListOptions{LabelSelector: v1beta1.ManagedByLabel + "=" + v1beta1.ManagedByValue}
	// One namespace's collection at a time is deleted one object after
	// another (the API server's --delete-collection-workers is 1): all
	// namespaces at once.
	if err := parallel(ctx, len(b.nsNames), len(b.nsNames), func(i int) error {
		return kq.LocalQueues(b.nsNames[i]).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	}); err != nil {
		return err
	}
	if err := kq.ClusterQueues().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	if err := kq.Cohorts().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	names := b.w.aqNames()
	if err := parallel(ctx, len(names), 32, func(i int) error {
		_, err := b.aqs.OmeV1beta1().AcceleratorQuotas().Patch(ctx, names[i], types.MergePatchType, []byte(`{"status":null}`), metav1.PatchOptions{}, "status")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for b.w.objects() > 0 || b.w.materialized() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("reset: %d managed objects and %d Materialized nodes left", b.w.objects(), b.w.materialized())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.quiesce(ctx)
	b.w.restart()
	return nil
}

// quiesce waits until the control plane is idle (etcd, kube-apiserver and
// Kueue together under 10% of a core over 2 s), at most 3 minutes: Kueue
// handles the deletion of 21,000 objects long after the API server has
// answered, and the next run would otherwise pay for the last one's
// cleanup (the first runs start from an idle control plane).
func (b *bench) quiesce(ctx context.Context) {
	waited := localcluster.Quiesce(ctx, b.c.Processes(), 3*time.Minute)
	logf("control plane idle after %s", waited.Round(100*time.Millisecond))
}

func (b *bench) measure(ctx context.Context) error {
	sh := b.sh
	kueueObjects := func(cohorts int) int { return cohorts + 1 + cohorts*sh.teamsPerCohort*(1+sh.namespaces) }
	nodes := func(cohorts int) int { return cohorts + 1 + cohorts*sh.teamsPerCohort }

	// The smaller tree: CPU per ClusterQueue status update at its size.
	small := b.tree(0, sh.small)
	if err := b.createTree(ctx, small); err != nil {
		return err
	}
	logf("small tree (%d ClusterQueues): manager at matching limits...", sh.small*sh.teamsPerCohort)
	m, started, err := b.startMatched(ctx, "m-small")
	if err != nil {
		return err
	}
	if _, err := b.waitMaterialized(ctx, started, kueueObjects(sh.small), nodes(sh.small), 5*time.Minute); err != nil {
		m.Kill()
		return err
	}
	cpuSmall, err := b.cpuPerUpdate(ctx, m, sh.small)
	m.Stop()
	if err != nil {
		return err
	}

	// The whole tree, at matching limits: the bare client and the manager
	// each materialize it matchRounds times, in turn, each run on a fresh
	// control plane. On two cores that etcd, the API server and Kueue
	// saturate, one run of each varies by more than the bound (the bare
	// client alone has taken 37 to 82 s), and other work only ever adds
	// time, so the best of each is compared.
	all := append(small, b.tree(sh.small, sh.cohorts)...)
	out := b.desired(all)
	nObjects := len(out.Cohorts) + len(out.ClusterQueues) + len(out.LocalQueues)
	var bares []time.Duration
	var matches []materialization
	var bareCPU, matchCPU []time.Duration // all processes' CPU in each run
	var perChange string
	var cpuLarge time.Duration
	var rss memory
	for round := 1; round <= matchRounds; round++ {
		if err := b.fresh(ctx, all); err != nil {
			return err
		}
		logf("bare client: %d Kueue objects, %d workers, QPS %d, burst %d (round %d of %d)...", nObjects, matchWorkers, matchQPS, matchBurst, round, matchRounds)
		pids := b.processes()
		c0 := localcluster.CPUTimes(pids)
		bare, err := b.bareApply(ctx, out)
		if err != nil {
			return err
		}
		bareCPU = append(bareCPU, cpuTotal(c0, localcluster.CPUTimes(pids)))
		if err := b.fresh(ctx, all); err != nil {
			return err
		}
		logf("manager at matching limits (round %d of %d)...", round, matchRounds)
		pids = b.processes()
		c0 = localcluster.CPUTimes(pids)
		m, started, err := b.startMatched(ctx, "m-match")
		if err != nil {
			return err
		}
		pids["manager"] = m.Pid()
		match, err := b.waitMaterialized(ctx, started, nObjects, len(all), 10*time.Minute)
		matchCPU = append(matchCPU, cpuTotal(c0, localcluster.CPUTimes(pids)))
		if err == nil && round == 1 {
			// The first manager also measures a budget change, the cost
			// of a status update at this size, and its RSS.
			if perChange, err = b.writesPerChange(ctx, m); err == nil {
				if cpuLarge, err = b.cpuPerUpdate(ctx, m, sh.cohorts); err == nil {
					rss, err = b.rss(ctx, m)
				}
			}
		}
		m.Stop()
		if err != nil {
			return err
		}
		bares, matches = append(bares, bare), append(matches, match)
	}
	if err := b.fresh(ctx, all); err != nil {
		return err
	}
	bareAt, matchAt := best(bares, matches)
	bare, match := bares[bareAt], matches[matchAt]

	d := manager.DefaultOptions()
	m, def, latencies, err := b.defaultPass(ctx, nObjects, len(all))
	if err != nil {
		return err
	}
	noop, applied, err := b.noopResync(ctx, m)
	m.Stop()
	if err != nil {
		return err
	}

	// The table.
	t := &b.t
	// What the default limits allow: the burst is free, the rest at QPS
	// (statuses go through a client of their own, with its own bucket).
	allowed := time.Duration(float64(max(nObjects-d.KubeAPIBurst, 0)) / float64(d.KubeAPIQPS) * float64(time.Second))
	of := func(get func(materialization) time.Duration) string {
		var ds []time.Duration
		for _, m := range matches {
			ds = append(ds, get(m))
		}
		return fmt.Sprintf("%s (of %s)", secs(get(match)), runs(ds))
	}
	bareCol := fmt.Sprintf("%s bare client (of %s)", secs(bare), runs(bares))
	t.add(fmt.Sprintf("time to all %d objects, matching limits (QPS %d, burst %d, %d workers), best of %d", nObjects, matchQPS, matchBurst, matchWorkers, len(matches)),
		of(func(m materialization) time.Duration { return m.objects }), bareCol, ratio(match.objects.Seconds(), bare.Seconds()))
	t.add(fmt.Sprintf("time to all nodes Materialized, matching limits, best of %d", len(matches)),
		of(func(m materialization) time.Duration { return m.allMaterialized }), bareCol, ratio(match.allMaterialized.Seconds(), bare.Seconds()))
	t.add("time to the first team Materialized, matching limits (worst run)", secs(worst(matches)), "-", "-")
	perObject := func(cpu, wall time.Duration) string {
		return fmt.Sprintf("%.2f ms (%.2f cores busy)", float64(cpu.Microseconds())/1000/float64(nObjects), cpu.Seconds()/wall.Seconds())
	}
	t.add("CPU per object of all processes (etcd, kube-apiserver, Kueue, perf, manager), matching limits, best runs",
		perObject(matchCPU[matchAt], match.allMaterialized), perObject(bareCPU[bareAt], bare)+" bare client", ratio(matchCPU[matchAt].Seconds(), bareCPU[bareAt].Seconds()))
	t.add(fmt.Sprintf("time to all objects, default limits (QPS %g, burst %d, %d workers)", d.KubeAPIQPS, d.KubeAPIBurst, d.ApplyWorkers), secs(def.objects), secs(allowed)+" (objects-burst)/QPS", ratio(def.objects.Seconds(), allowed.Seconds()))
	t.add("time to all nodes Materialized, default limits", secs(def.allMaterialized), secs(allowed)+" (objects-burst)/QPS", ratio(def.allMaterialized.Seconds(), allowed.Seconds()))
	t.add("time to the first team Materialized, default limits", secs(def.firstTeam), "-", "-")
	if len(latencies) > 0 {
		t.add(fmt.Sprintf("admin budget change to its ClusterQueue during the bulk pass (%d tries)", len(latencies)),
			fmt.Sprintf("p50 %s, p99 %s", pct(latencies, 50), pct(latencies, 99)), "-", "-")
	}
	t.add("Kueue writes of a no-op resync (two full comparisons)", fmt.Sprintf("%.0f (objects confirmed: %.0f)", noop, applied), "0", "-")
	t.add("writes per budget change", perChange, "1 ClusterQueue + 1 status", "-")
	t.add(fmt.Sprintf("manager CPU per ClusterQueue status update, %d vs %d ClusterQueues", sh.small*sh.teamsPerCohort, sh.cohorts*sh.teamsPerCohort),
		fmt.Sprintf("%.2f ms", cpuLarge.Seconds()*1000), fmt.Sprintf("%.2f ms", cpuSmall.Seconds()*1000), ratio(cpuLarge.Seconds(), cpuSmall.Seconds()))
	return b.addRSSRows(ctx, rss)
}

// defaultPass starts the manager at the default limits and makes the
// admin changes during its bulk pass; it returns the manager running, the
// times of its materialization and the changes' latencies.
func (b *bench) defaultPass(ctx context.Context, objects, nodes int, extra ...string) (*localcluster.Manager, materialization, []time.Duration, error) {
	d := manager.DefaultOptions()
	logf("manager at the default limits (QPS %g, burst %d, %d workers), with %d admin changes during the bulk pass...", d.KubeAPIQPS, d.KubeAPIBurst, d.ApplyWorkers, b.sh.tries)
	m, started, err := b.startManager(ctx, "m-default", float64(d.KubeAPIQPS), d.KubeAPIBurst, d.ApplyWorkers, append([]string{"--capacity-report-interval=3s", "--resync-interval=3s"}, extra...)...)
	if err != nil {
		return nil, materialization{}, nil, err
	}
	lat := b.adminChanges(ctx, b.sh.tries)
	def, err := b.waitMaterialized(ctx, started, objects, nodes, 20*time.Minute)
	var latencies []time.Duration
	if err == nil {
		latencies, err = lat()
	}
	if err != nil {
		m.Kill()
		return nil, def, nil, err
	}
	return m, def, latencies, nil
}

// rssLarge writes the Nodes of the large variant and measures the RSS of
// a manager started on them (the tree materialized already).
func (b *bench) rssLarge(ctx context.Context) (memory, error) {
	logf("large variant: %d Nodes in all...", b.sh.more)
	if err := b.writeNodes(ctx, b.sh.nodes, b.sh.more); err != nil {
		return memory{}, err
	}
	m, _, err := b.startMatched(ctx, "m-large")
	if err != nil {
		return memory{}, err
	}
	time.Sleep(5 * time.Second) // the first comparison of every node
	mem, err := b.rss(ctx, m)
	m.Stop()
	return mem, err
}

// measureRSS is the -rss form: the whole tree materialized at matching
// limits, then the two RSS rows of the full run, measured the same way.
func (b *bench) measureRSS(ctx context.Context) error {
	sh := b.sh
	all := b.tree(0, sh.cohorts)
	if err := b.createTree(ctx, all); err != nil {
		return err
	}
	nObjects := sh.cohorts + 1 + sh.cohorts*sh.teamsPerCohort*(1+sh.namespaces)
	logf("manager at matching limits...")
	m, started, err := b.startMatched(ctx, "m-match")
	if err != nil {
		return err
	}
	if _, err := b.waitMaterialized(ctx, started, nObjects, len(all), 10*time.Minute); err != nil {
		m.Kill()
		return err
	}
	rss, err := b.rss(ctx, m)
	m.Stop()
	if err != nil {
		return err
	}
	return b.addRSSRows(ctx, rss)
}

// addRSSRows measures the large variant (rssLarge) and adds the two RSS
// rows of the table: rss, the manager's on the tree at sh.nodes Nodes,
// then the large variant's.
func (b *bench) addRSSRows(ctx context.Context, rss memory) error {
	rssLarge, err := b.rssLarge(ctx)
	if err != nil {
		return err
	}
	b.addRSS(b.sh.nodes, rss)
	b.addRSS(b.sh.more, rssLarge)
	return nil
}

// memory is one RSS measurement: the manager's RSS and Go heap in use,
// and the RSS of the bare informers.
type memory struct {
	rss, heap, bare int64
}

func (b *bench) addRSS(nodes int, m memory) {
	b.t.add(fmt.Sprintf("RSS, %d Nodes (Go heap in use)", nodes), fmt.Sprintf("%s (%s)", mib(m.rss), mib(m.heap)), mib(m.bare)+" bare informers", ratio(float64(m.rss), float64(m.bare)))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func pct(d []time.Duration, p int) string {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(time.Millisecond).String()
}

// bareApply writes the objects with server-side apply from matchWorkers
// goroutines at the matching limits, and returns how long it took.
func (b *bench) bareApply(ctx context.Context, out *projector.Output) (time.Duration, error) {
	cfg := rest.CopyConfig(b.c.Config)
	cfg.QPS, cfg.Burst = float32(matchQPS), matchBurst
	kq := kueueclient.NewForConfigOrDie(cfg).KueueV1beta2()
	opts := metav1.ApplyOptions{FieldManager: apply.FieldManager, Force: true}
	var writes []func() error
	for _, d := range out.Cohorts {
		writes = append(writes, func() error { _, err := kq.Cohorts().Apply(ctx, d, opts); return err })
	}
	for _, d := range out.ClusterQueues {
		writes = append(writes, func() error { _, err := kq.ClusterQueues().Apply(ctx, d, opts); return err })
	}
	for _, d := range out.LocalQueues {
		writes = append(writes, func() error { _, err := kq.LocalQueues(*d.Namespace).Apply(ctx, d, opts); return err })
	}
	if *bareStatus {
		aqs := versioned.NewForConfigOrDie(cfg).OmeV1beta1().AcceleratorQuotas()
		for name, st := range out.Statuses {
			st := st.DeepCopy()
			for i := range st.Conditions {
				st.Conditions[i].LastTransitionTime = metav1.Now()
			}
			ac, err := apply.StatusApply(name, st)
			if err != nil {
				return 0, err
			}
			writes = append(writes, func() error { _, err := aqs.ApplyStatus(ctx, ac, opts); return err })
		}
	}
	start := time.Now()
	err := parallel(ctx, len(writes), matchWorkers, func(i int) error { return writes[i]() })
	return time.Since(start), err
}

// writesPerChange changes one team's budget and counts the manager's
// writes by kind until the team is Materialized at the new generation.
func (b *bench) writesPerChange(ctx context.Context, m *localcluster.Manager) (string, error) {
	kinds := []string{"Cohort", "ClusterQueue", "LocalQueue", "status"}
	count := func() ([]float64, error) {
		var out []float64
		for _, k := range kinds {
			v, err := m.Metric(ctx, "ome_quota_backend_writes_total", `kind="`+k+`"`)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	before, err := count()
	if err != nil {
		return "", err
	}
	team := teamName(0, 0)
	gen, err := b.setBudget(ctx, team, "1")
	if err != nil {
		return "", err
	}
	if err := b.w.waitCQ(ctx, team, "1", time.Minute); err != nil {
		return "", err
	}
	if err := b.w.waitGeneration(ctx, team, gen, time.Minute); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second) // any later write would show by now
	after, err := count()
	if err != nil {
		return "", err
	}
	var parts []string
	for i, k := range kinds {
		if n := after[i] - before[i]; n != 0 {
			parts = append(parts, fmt.Sprintf("%.0f %s", n, k))
		}
	}
	if len(parts) == 0 {
		return "none", nil
	}
	return strings.Join(parts, " + "), nil
}

func (b *bench) setBudget(ctx context.Context, team, nominal string) (int64, error) {
	patch := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%s"}]}}`, nominal)
	aq, err := b.aqs.OmeV1beta1().AcceleratorQuotas().Patch(ctx, team, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return aq.Generation, nil
}

// adminChanges changes a budget every little while during the bulk pass,
// timing each from the write's answer to its ClusterQueue in the cache;
// the returned function waits for the last and returns the latencies.
func (b *bench) adminChanges(ctx context.Context, tries int) func() ([]time.Duration, error) {
	var lat []time.Duration
	done := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		for i := range tries {
			// A team in the middle of the tree, its nominal 2 -> 1.
			c := (i*7 + b.sh.cohorts/2) % b.sh.cohorts
			team := teamName(c, (i*3)%b.sh.teamsPerCohort)
			if _, err := b.setBudget(ctx, team, "1"); err != nil {
				done <- err
				return
			}
			wrote := time.Now()
			if err := b.w.waitCQ(ctx, team, "1", time.Minute); err != nil {
				done <- err
				return
			}
			lat = append(lat, time.Since(wrote))
			if *verboseTries {
				logf("admin change %d: %s to nominal 1 in %s", i, team, lat[len(lat)-1].Round(time.Millisecond))
			}
			if _, err := b.setBudget(ctx, team, "2"); err != nil {
				done <- err
				return
			}
			time.Sleep(time.Second)
		}
		done <- nil
	}()
	return func() ([]time.Duration, error) { return lat, <-done }
}

// noopResync counts the Kueue writes over two ticks of a materialized
// tree, and the objects those comparisons confirmed.
func (b *bench) noopResync(ctx context.Context, m *localcluster.Manager) (writes, confirmed float64, err error) {
	time.Sleep(3 * time.Second) // the writes that restore the budgets land
	sum := func(family string, match ...string) float64 {
		var s float64
		for _, k := range []string{"Cohort", "ClusterQueue", "LocalQueue"} {
			v, e := m.Metric(ctx, family, append(match, `kind="`+k+`"`)...)
			if e != nil {
				err = e
			}
			s += v
		}
		return s
	}
	w0, a0 := sum("ome_quota_backend_writes_total"), sum("ome_quota_backend_applied_total")
	time.Sleep(7 * time.Second) // two ticks of 3 s
	w1, a1 := sum("ome_quota_backend_writes_total"), sum("ome_quota_backend_applied_total")
	return w1 - w0, a1 - a0, err
}

// cpuPerUpdate writes ClusterQueue status updates (flavorsUsage, as Kueue
// does on an admission) across the first Cohorts' teams, and divides the
// manager's CPU time over the window by the updates its cache saw. It
// keeps the least of three windows: other work on a shared machine only
// ever adds to a process's CPU time.
func (b *bench) cpuPerUpdate(ctx context.Context, m *localcluster.Manager, cohorts int) (time.Duration, error) {
	time.Sleep(3 * time.Second) // settle after the materialization
	kq := b.kueue.KueueV1beta2()
	var best time.Duration
	per := max(b.sh.updates/3, 1)
	for w := range 3 {
		u0 := b.w.cqUpdates.Load()
		c0, err := localcluster.CPUTime(m.Pid())
		if err != nil {
			return 0, err
		}
		for j := range per {
			i := w*per + j
			team := teamName(i%cohorts, (i/cohorts)%b.sh.teamsPerCohort)
			patch := fmt.Sprintf(`{"status":{"flavorsUsage":[{"name":"a100","resources":[{"name":"nvidia.com/gpu","total":"%d","borrowed":"0"}]}]}}`, 1+i%2)
			if _, err := kq.ClusterQueues().Patch(ctx, team, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				return 0, err
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // the status writes they cause land
		c1, err := localcluster.CPUTime(m.Pid())
		if err != nil {
			return 0, err
		}
		n := b.w.cqUpdates.Load() - u0
		if n == 0 {
			return 0, fmt.Errorf("no ClusterQueue update seen")
		}
		if d := (c1 - c0) / time.Duration(n); w == 0 || d < best {
			best = d
		}
	}
	return best, nil
}

// rss reads the manager's RSS, and that of a bare process holding the same
// informers (this binary's informer mode).
func (b *bench) rss(ctx context.Context, m *localcluster.Manager) (mem memory, err error) {
	time.Sleep(3 * time.Second)
	if mem.rss, err = localcluster.RSS(m.Pid()); err != nil {
		return
	}
	heap, err := m.Metric(ctx, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return
	}
	mem.heap = int64(heap)
	self, err := os.Executable()
	if err != nil {
		return
	}
	cmd := exec.CommandContext(ctx, self, "informer", b.c.Kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return
	}
	cmd.Stderr = os.Stderr
	if err = cmd.Start(); err != nil {
		return
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	buf := make([]byte, 64)
	if _, err = out.Read(buf); err != nil {
		return mem, fmt.Errorf("bare informer: %w", err)
	}
	time.Sleep(3 * time.Second)
	mem.bare, err = localcluster.RSS(cmd.Process.Pid)
	return
}

// bareInformer holds the informers the manager holds, prints "synced" and
// waits to be killed.
func bareInformer(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	stop := make(chan struct{})
	core := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(cfg), 0)
	kf := kueueinformers.NewSharedInformerFactory(kueueclient.NewForConfigOrDie(cfg), 0)
	af := aqinformers.NewSharedInformerFactory(versioned.NewForConfigOrDie(cfg), 0)
	core.Core().V1().Nodes().Informer()
	kq := kf.Kueue().V1beta2()
	kq.ResourceFlavors().Informer()
	kq.ClusterQueues().Informer()
	kq.Cohorts().Informer()
	kq.LocalQueues().Informer()
	af.Ome().V1beta1().AcceleratorQuotas().Informer()
	core.Start(stop)
	kf.Start(stop)
	af.Start(stop)
	core.WaitForCacheSync(stop)
	kf.WaitForCacheSync(stop)
	af.WaitForCacheSync(stop)
	runtime.GC()
	fmt.Println("synced")
	select {}
}

// watcher follows the managed Kueue objects and the nodes' Materialized
// condition in this process's own informers.
type watcher struct {
	mu        sync.Mutex
	managed   map[string]bool
	mat       map[string]bool // node -> Materialized True
	roles     map[string]v1beta1.Role
	gens      map[string]int64 // node -> observedGeneration of a Materialized True
	cqNominal map[string]string
	// since restart: when the managed count first reached a target, and
	// when the first team and all nodes turned Materialized.
	firstTeam time.Time
	cqUpdates atomic.Int64
	lqUpdates atomic.Int64 // LocalQueue updates seen (Kueue's status writes, mostly)
	aqLister  func() []string
	atCount   map[int]time.Time
	atAll     map[int]time.Time
}

func newWatcher(ctx context.Context, cfg *rest.Config) *watcher {
	w := &watcher{managed: map[string]bool{}, mat: map[string]bool{}, roles: map[string]v1beta1.Role{}, gens: map[string]int64{},
		cqNominal: map[string]string{}, atCount: map[int]time.Time{}, atAll: map[int]time.Time{}}
	kf := kueueinformers.NewSharedInformerFactory(kueueclient.NewForConfigOrDie(cfg), 0)
	af := aqinformers.NewSharedInformerFactory(versioned.NewForConfigOrDie(cfg), 0)
	kq := kf.Kueue().V1beta2()
	track := func(kind string) cache.ResourceEventHandlerFuncs {
		set := func(obj any, present bool) {
			o, ok := obj.(metav1.Object)
			if !ok {
				if t, ok2 := obj.(cache.DeletedFinalStateUnknown); ok2 {
					o, _ = t.Obj.(metav1.Object)
				}
			}
			if o == nil {
				return
			}
			key := kind + "/" + o.GetNamespace() + "/" + o.GetName()
			w.mu.Lock()
			defer w.mu.Unlock()
			if present && o.GetLabels()[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue {
				w.managed[key] = true
			} else {
				delete(w.managed, key)
			}
			n := len(w.managed)
			if _, ok := w.atCount[n]; !ok {
				w.atCount[n] = time.Now()
			}
			if cq, ok := obj.(*kueuev1beta2.ClusterQueue); ok && !present {
				delete(w.cqNominal, cq.Name)
			} else if ok {
				for _, rg := range cq.Spec.ResourceGroups {
					for _, f := range rg.Flavors {
						for _, r := range f.Resources {
							if r.Name == "nvidia.com/gpu" {
								w.cqNominal[cq.Name] = r.NominalQuota.String()
							}
						}
					}
				}
			}
		}
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { set(obj, true) },
			UpdateFunc: func(_, obj any) {
				switch kind {
				case "ClusterQueue":
					w.cqUpdates.Add(1)
				case "LocalQueue":
					w.lqUpdates.Add(1)
				}
				set(obj, true)
			},
			DeleteFunc: func(obj any) { set(obj, false) },
		}
	}
	_, _ = kq.Cohorts().Informer().AddEventHandler(track("Cohort"))
	_, _ = kq.ClusterQueues().Informer().AddEventHandler(track("ClusterQueue"))
	_, _ = kq.LocalQueues().Informer().AddEventHandler(track("LocalQueue"))
	aqInf := af.Ome().V1beta1().AcceleratorQuotas().Informer()
	aqSet := func(obj any) {
		aq, ok := obj.(*v1beta1.AcceleratorQuota)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.roles[aq.Name] = aq.Spec.Role
		on := false
		for _, c := range aq.Status.Conditions {
			if c.Type == v1beta1.ConditionMaterialized && c.Status == metav1.ConditionTrue {
				on = true
				w.gens[aq.Name] = c.ObservedGeneration
			}
		}
		if on {
			w.mat[aq.Name] = true
			if aq.Spec.Role == v1beta1.RoleClusterQueue && w.firstTeam.IsZero() {
				w.firstTeam = time.Now()
			}
		} else {
			delete(w.mat, aq.Name)
		}
		n := len(w.mat)
		if _, ok := w.atAll[n]; !ok {
			w.atAll[n] = time.Now()
		}
	}
	_, _ = aqInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: aqSet, UpdateFunc: func(_, o any) { aqSet(o) }})
	w.aqLister = func() []string {
		var out []string
		for _, o := range aqInf.GetStore().List() {
			out = append(out, o.(*v1beta1.AcceleratorQuota).Name)
		}
		return out
	}
	kf.Start(ctx.Done())
	af.Start(ctx.Done())
	kf.WaitForCacheSync(ctx.Done())
	af.WaitForCacheSync(ctx.Done())
	return w
}

// restart forgets the times reached so far: the next run's start.
func (w *watcher) restart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.firstTeam = time.Time{}
	w.atCount, w.atAll = map[int]time.Time{}, map[int]time.Time{}
}

// progress is when the managed objects first numbered objects, when the
// first team and when nodes nodes were Materialized (zero: not yet).
func (w *watcher) progress(objects, nodes int) (o, first, all time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.atCount[objects], w.firstTeam, w.atAll[nodes]
}

func (w *watcher) objects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.managed)
}

func (w *watcher) materialized() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mat)
}

func (w *watcher) aqNames() []string { return w.aqLister() }

func (w *watcher) waitCQ(ctx context.Context, team, nominal string, timeout time.Duration) error {
	return w.wait(ctx, timeout, func() bool { return w.cqNominal[team] == nominal }, "ClusterQueue "+team+" at nominal "+nominal)
}

func (w *watcher) waitGeneration(ctx context.Context, team string, gen int64, timeout time.Duration) error {
	return w.wait(ctx, timeout, func() bool { return w.mat[team] && w.gens[team] >= gen }, fmt.Sprintf("%s Materialized at generation %d", team, gen))
}

func (w *watcher) wait(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting %s for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
