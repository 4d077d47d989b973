// Command webhookbench measures what the admission webhook adds to a write
// of the quota tree, on the local control plane: sequential budget updates
// of one team (raised and lowered in turn), and label-only updates, with the
// API server calling the webhook and not, in alternating blocks of 50
// against the same running manager, at each tree size.
//
//	go run ./test/cmd/webhookbench [-sizes 1000,5000] [-updates 500] [-paced] [-manager-args ARGS]
//	    [-cpuprofile FILE] [-keep FILE] [-attribute FILE] [-null-webhook] [-explain]
//
// It sends each write as soon as the last returns, as a script would; the
// manager's status writes then race the next write, at most once a second
// (the shell coalesces them). -paced waits, in both modes, until the
// manager has written the status of each write before the next one (with
// the coalescing, up to a second a write).
//
// It prints p50, p90, p99 and the mean per size, mode and kind of write
// (budget: every budget write; raise and lower: its two halves; label: a
// label only, which the API server admits without calling the webhook),
// the ratio with the webhook to without, and per size the p99 of the API
// server's own histogram of its calls of the webhook
// (apiserver_admission_webhook_admission_duration_seconds, UPDATE calls
// during the budget writes), estimated from its buckets as Prometheus's
// histogram_quantile does. On stderr it says where the time went, from the
// API server's metrics and the webhook's: how often the API server called
// the webhook for a write, the ledger's outcomes (reservations per write,
// conflicts, uncertain judgements), the webhook's handler and judging;
// where in their blocks the slowest writes of each mode fell; and the
// manager's GC cycles and ticks meanwhile. The manager runs at its default
// verbosity, as the chart runs it. -explain runs it at -v=2 instead, where
// each review logs a "judged" line, and takes the budget writes apart from
// that log (the handler, the rest: the API server and etcd), the slowest
// 2% one by one; the logging costs the manager CPU on every review. -cpuprofile profiles the manager and the API
// server over the budget writes, -keep keeps the manager's log and every
// budget write, and -attribute replaces the timed comparison with CPU
// profiles of each mode apart. -null-webhook has the API server call a
// webhook that admits everything at once in place of the manager's: what
// is left is the API server's own cost of calling a webhook. It is not
// run by `make test`: it takes several minutes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	quotaclient "ome.io/quota-manager/api/client"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/webhook"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "webhookbench:", err)
		os.Exit(1)
	}
}

func run() error {
	sizesFlag := flag.String("sizes", "1000,5000", "tree sizes (AcceleratorQuotas) to measure at, ascending")
	updates := flag.Int("updates", 500, "sequential writes per measurement")
	paced := flag.Bool("paced", false, "wait for the manager's status write of each write before the next one (default: back to back)")
	planeGC := flag.String("control-plane-gogc", "", "GOGC for etcd and kube-apiserver alone (e.g. 400; empty: as this process has it); the manager keeps this process's")
	managerEnv := flag.String("manager-env", "", "more environment for the manager alone, space-separated (e.g. GOGC=400)")
	managerArgs := flag.String("manager-args", "", "more flags for the manager, space-separated (e.g. --capacity-report-interval=0s: no ticks, no full comparisons)")
	cpuProfile := flag.String("cpuprofile", "", "write CPU profiles of the manager and the API server over the budget writes to this file, one per size (FILE.SIZE, FILE.SIZE.apiserver)")
	profileFor := flag.Duration("cpuprofile-for", 20*time.Second, "how long -cpuprofile profiles, from the first budget write")
	attribute := flag.String("attribute", "", "instead of the timed comparison, send budget writes back to back for -cpuprofile-for with the webhook off and then on, under CPU profiles of the manager and the API server (FILE.SIZE.off, FILE.SIZE.on, and .apiserver), and print each process's CPU per write in each mode; no latency figures")
	seed := flag.Uint64("seed", 0, "seed of the order of the two modes in each pair of blocks (0: from the clock; the run prints it)")
	fixedOrder := flag.Bool("fixed-order", false, "every pair of blocks without the webhook first, then with it (the default draws the order of each pair, so that nothing periodic in the API server can fall in step with the alternation and always land in the same mode)")
	explainFlag := flag.Bool("explain", false, "run the manager at -v=2, where the webhook logs each review, and take the budget writes apart from that log; the logging costs CPU on every review, so the other figures are then not those of the manager as the chart runs it")
	null := flag.Bool("null-webhook", false, "with the webhook on, the API server calls a webhook in this process that admits every review at once, in place of the manager's (which runs all the same): the floor under the webhook's figures on this machine")
	keepFiles := flag.String("keep", "", "keep the manager's log and the budget writes, one line each (when sent, with the webhook or not, raise or lower, place in its block, generation judged on, duration), in FILE.SIZE.log and FILE.SIZE.writes")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 20 {
			return fmt.Errorf("-sizes: %q is not a size of at least 20", s)
		}
		sizes = append(sizes, n)
	}
	if !slices.IsSorted(sizes) {
		return errors.New("-sizes must be ascending: the tree only grows")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env := strings.Fields(*managerEnv)
	if *planeGC != "" {
		// The control plane inherits this process's environment; the
		// manager gets back what it was (later entries win).
		env = append([]string{"GOGC=" + os.Getenv("GOGC")}, env...)
		if err := os.Setenv("GOGC", *planeGC); err != nil {
			return err
		}
	}
	fmt.Fprintln(os.Stderr, "starting etcd and kube-apiserver on loopback...")
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	bin, err := localcluster.BuildManager(ctx, c.Dir)
	if err != nil {
		return err
	}
	if err := localcluster.WriteDemoCluster(ctx, c); err != nil {
		return err
	}
	if err := c.CreateWebhookSecret(ctx); err != nil {
		return err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 5000, 5000
	aqs, err := quotaclient.AcceleratorQuotas(cfg)
	if err != nil {
		return err
	}
	b := &bench{c: c, bin: bin, aqs: aqs, updates: *updates, backToBack: !*paced, extra: strings.Fields(*managerArgs), env: env,
		profile: *cpuProfile, profileFor: *profileFor, keep: *keepFiles, attribute: *attribute, explain: *explainFlag}
	if !*fixedOrder {
		if *seed == 0 {
			*seed = uint64(time.Now().UnixNano())
		}
		b.order = rand.New(rand.NewPCG(*seed, 0))
		fmt.Fprintf(os.Stderr, "the order of the modes in each pair of blocks is drawn with -seed %d\n", *seed)
	}
	if *null {
		if b.null, err = startNull(ctx); err != nil {
			return err
		}
	}
	if b.profile != "" || b.attribute != "" {
		b.extra = append(b.extra, "--profiling")
	}
	// The manager creates root: start one without the webhook to do it.
	m, err := b.start(ctx, 0)
	if err != nil {
		return err
	}
	m.Stop()

	fmt.Printf("%-6s %-10s %-8s %9s %9s %9s %9s\n", "aqs", "webhook", "write", "p50", "p90", "p99", "mean")
	var calls []string // the API server's webhook calls, a line per size
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "growing the tree to %d AcceleratorQuotas...\n", n)
		if err := b.grow(ctx, n); err != nil {
			return err
		}
		res, err := b.measure(ctx, n)
		if err != nil {
			return err
		}
		if res == nil {
			continue // -attribute: no timed comparison
		}
		for _, kind := range []string{"budget", "raise", "lower", "label"} {
			for _, on := range []bool{false, true} {
				mode := "off"
				if on {
					mode = "on"
				}
				d := res.d[kind][on]
				fmt.Printf("%-6d %-10s %-8s %9s %9s %9s %9s\n", n, mode, kind, pct(d, 50), pct(d, 90), pct(d, 99), mean(d))
			}
			off, on := res.d[kind][false], res.d[kind][true]
			ratio := func(p int) string {
				return fmt.Sprintf("%.2fx", float64(quantile(on, p))/float64(max(quantile(off, p), 1)))
			}
			fmt.Printf("%-6d %-10s %-8s %9s %9s %9s %9s\n", n, "on/off", kind, ratio(50), ratio(90), ratio(99),
				fmt.Sprintf("%.2fx", float64(meanOf(on))/float64(max(meanOf(off), 1))))
		}
		label := res.d["label"]
		fmt.Printf("%-6d %-10s %-8s %9s\n", n, "on-off", "label", fmtDur(quantile(label[true], 50)-quantile(label[false], 50)))
		calls = append(calls, res.calls.String(n))
	}
	fmt.Println()
	for _, line := range calls {
		fmt.Println(line)
	}
	return nil
}

type write struct{ cohort, team string }

type bench struct {
	c       *localcluster.Cluster
	bin     string
	aqs     aqtyped.AcceleratorQuotaInterface
	updates int
	// backToBack: no wait for the manager's status write between writes.
	backToBack bool
	size       int // nodes written so far, root included
	saved      *admissionregistrationv1.ValidatingWebhookConfiguration
	extra      []string // more flags for the manager
	env        []string // more environment for the manager
	// profile, when set, names the file of the manager's CPU profile over
	// profileFor from the first budget write.
	profile    string
	profileFor time.Duration
	// attribute, when set, replaces the timed comparison with profiles of
	// each mode (see the flag).
	attribute string
	// keep, when set, names the files that keep the manager's log and the
	// budget writes one by one (FILE.SIZE.log, FILE.SIZE.writes).
	keep string
	// order draws which mode comes first in each pair of blocks; nil:
	// without the webhook first, always.
	order *rand.Rand
	// explain: the manager logs each review (-v=2), and measure takes the
	// budget writes apart from that log.
	explain bool
	// null, when set, is the webhook the API server calls in place of the
	// manager's (-null-webhook).
	null *nullWebhook
}

// start starts a manager, with the webhook on port (0: without it), and
// waits until it is ready.
func (b *bench) start(ctx context.Context, port int) (*localcluster.Manager, error) {
	args := append([]string{"--leader-elect=false"}, b.extra...)
	if port == 0 {
		args = append(args, "--webhook=false")
	} else {
		args = append(args, localcluster.WebhookFlags(port)...)
	}
	if b.explain {
		// The webhook logs a "judged" line per review (its base and
		// outcome), which measure reads back.
		args = append(args, "-v=2")
	}
	return b.c.StartManagerEnv(ctx, b.bin, fmt.Sprintf("bench-%d", port), b.c.Dir, b.env, args...)
}

// grow creates Cohorts of ten teams of 1 GPU under root until the tree
// holds n nodes, 16 writes at a time, with no webhook configured.
func (b *bench) grow(ctx context.Context, n int) error {
	var cohorts, teams []write
	for i := b.size; i < n-1; i++ { // root is one of n
		c := fmt.Sprintf("bench-cohort-%04d", i/11)
		if i%11 == 0 {
			cohorts = append(cohorts, write{cohort: c})
		} else {
			teams = append(teams, write{cohort: c, team: fmt.Sprintf("%s-team-%d", c, i%11)})
		}
	}
	// Each Cohort before its teams.
	for _, wave := range [][]write{cohorts, teams} {
		if err := parallel(ctx, 16, len(wave), func(i int) error {
			w := wave[i]
			obj := aqtest.Cohort(w.cohort, "root").Budget("nvidia.com/gpu", "a100", "10").Obj()
			if w.team != "" {
				obj = aqtest.Team(w.team, w.cohort).Budget("nvidia.com/gpu", "a100", "1").Obj()
			}
			_, err := b.aqs.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	b.size = n - 1
	return nil
}

func parallel(ctx context.Context, workers, n int, f func(int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		case <-ctx.Done():
			close(next)
			wg.Wait()
			return ctx.Err()
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// measure runs one manager with the webhook at tree size n, waits until
// its state holds the whole tree and it has stopped writing statuses, and
// times the writes in blocks of 50, alternating between the webhook
// configuration removed (the API server calls no webhook) and installed,
// so that both modes see the same manager and the same load on the
// machine.
func (b *bench) measure(ctx context.Context, n int) (*result, error) {
	port, err := localcluster.FreePort()
	if err != nil {
		return nil, err
	}
	if err := b.c.CreateWebhookConfig(ctx, port); err != nil {
		return nil, err
	}
	m, err := b.start(ctx, port)
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	defer func() { _ = b.setWebhook(context.Background(), m, false) }()
	if err := settle(ctx, m, n); err != nil {
		return nil, err
	}
	b.quiesce(ctx, m)
	team := "bench-cohort-0000-team-1"
	if b.attribute != "" {
		return nil, b.attributeCPU(ctx, m, n, team)
	}
	// raise and lower split the budget writes: a raise is reserved in the
	// admission ledger, a lowering of a team's budgets needs no reservation.
	out := map[string]map[bool][]time.Duration{"budget": {}, "raise": {}, "lower": {}, "label": {}}
	res := &result{d: out}
	patches := map[string]func(i int) string{
		"budget": budgetPatch,
		"label":  func(i int) string { return fmt.Sprintf(`{"metadata":{"labels":{"bench":"%d"}}}`, i) },
	}
	var status *statusWatch
	if !b.backToBack {
		if status, err = b.watchStatus(ctx, team); err != nil {
			return nil, err
		}
		defer status.stop()
	}
	const block = 50
	i := 0
	var timed []timedWrite
	pids := b.processes(m)
	cpu := map[bool]map[string]time.Duration{false: {}, true: {}}
	var wall [2]time.Duration
	before, err := b.managerCounters(ctx, m)
	if err != nil {
		return nil, err
	}
	for _, kind := range []string{"budget", "label"} {
		before, err := b.breakdown(ctx, m)
		if err != nil {
			return nil, err
		}
		if kind == "budget" && b.profile != "" {
			profiled := b.startProfile(ctx, m, fmt.Sprintf("%s.%d", b.profile, n))
			defer func() {
				if err := <-profiled; err != nil {
					fmt.Fprintln(os.Stderr, "webhookbench: the CPU profile:", err)
				}
			}()
		}
		for done := 0; done < b.updates; done += block {
			modes := []bool{false, true}
			if b.order != nil && b.order.IntN(2) == 1 {
				modes = []bool{true, false}
			}
			for _, on := range modes {
				if err := b.setWebhook(ctx, m, on); err != nil {
					return nil, err
				}
				judged, err := b.answered(ctx, m, "UPDATE")
				if err != nil {
					return nil, err
				}
				cpu0, wall0 := localcluster.CPUTimes(pids), time.Now()
				for pos := range min(block, b.updates-done) {
					i++
					at := time.Now()
					d, aq, err := b.timed(ctx, team, patches[kind](i))
					if err != nil {
						return nil, fmt.Errorf("%s update %d (webhook %v): %w", kind, i, on, err)
					}
					out[kind][on] = append(out[kind][on], d)
					if kind == "budget" {
						dir := map[bool]string{true: "raise", false: "lower"}[i%2 == 0]
						out[dir][on] = append(out[dir][on], d)
						rv, _ := strconv.ParseUint(aq.ResourceVersion, 10, 64)
						timed = append(timed, timedWrite{d: d, raise: i%2 == 0, gen: aq.Generation - 1, rv: rv, on: on, pos: pos, at: at})
					}
					if status != nil {
						// The manager writes the team's status for each
						// generation: wait for it, so that it does not race
						// the next write (which the API server would then
						// judge again).
						if err := status.await(ctx, aq.Generation); err != nil {
							return nil, err
						}
					}
				}
				if kind == "budget" {
					wall[btoi(on)] += time.Since(wall0)
					for name, t := range localcluster.CPUTimes(pids) {
						cpu[on][name] += t - cpu0[name]
					}
				}
				after, err := b.answered(ctx, m, "UPDATE")
				if err != nil {
					return nil, err
				}
				// Budget writes reach the webhook while it is installed; label
				// writes never do (the configuration admits a write that
				// leaves the spec alone without calling it).
				if want := on && kind == "budget"; want != (after > judged) {
					return nil, fmt.Errorf("%s writes, webhook %v, but it answered %v updates of the block", kind, on, after-judged)
				}
			}
		}
		after, err := b.breakdown(ctx, m)
		if err != nil {
			return nil, err
		}
		c := after.sub(before)
		c.print(n, kind, len(out[kind][true]), len(out[kind][false]))
		if kind == "budget" {
			res.calls = c
			res.calls.writes = len(out[kind][true])
		}
	}
	after, err := b.managerCounters(ctx, m)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "n=%d, the manager meanwhile: %d GC cycles, longest pause %.2fms; %d ticks (full comparisons)\n",
		n, int(after.gcs-before.gcs), 1000*after.gcMax, int(after.ticks-before.ticks))
	// CPU per budget write, and how busy the machine's cores were while
	// the writes ran, in each mode.
	line := fmt.Sprintf("n=%d, CPU per budget write without / with the webhook:", n)
	names := slices.Sorted(maps.Keys(pids))
	for _, name := range names {
		line += fmt.Sprintf(" %s %.2f / %.2fms;", name, ms(cpu[false][name], len(out["budget"][false])), ms(cpu[true][name], len(out["budget"][true])))
	}
	busy := func(on bool) float64 {
		var sum time.Duration
		for _, t := range cpu[on] {
			sum += t
		}
		return 100 * sum.Seconds() / max(wall[btoi(on)].Seconds(), 1e-9) / float64(runtime.NumCPU())
	}
	fmt.Fprintf(os.Stderr, "%s these processes kept %.0f%% / %.0f%% of the %d cores busy while the writes ran\n", line, busy(false), busy(true), runtime.NumCPU())
	raw, err := os.ReadFile(m.Log)
	if err != nil {
		return nil, err
	}
	if b.keep != "" {
		if err := keep(fmt.Sprintf("%s.%d", b.keep, n), raw, timed); err != nil {
			return nil, err
		}
	}
	if b.explain {
		explain(n, team, timed, parseReviews(string(raw)))
	}
	return res, nil
}

// result is one size's measurement: the writes' durations by kind and
// mode, and the figures of the budget writes from the metrics.
type result struct {
	d     map[string]map[bool][]time.Duration
	calls counters
}

// setWebhook installs or removes the webhook configuration and waits until
// the API server acts on it: a write of a probe label is judged by the
// webhook, or not.
func (b *bench) setWebhook(ctx context.Context, m *localcluster.Manager, on bool) error {
	vwc := b.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	name := webhook.DefaultConfigName
	if b.null != nil {
		// The manager's configuration (made anew at each size) goes,
		// kept as the model of the null webhook's.
		name = nullConfigName
		cfg, err := vwc.Get(ctx, webhook.DefaultConfigName, metav1.GetOptions{})
		if err == nil {
			b.saved = cfg.DeepCopy()
			b.null.point(b.saved)
			err = vwc.Delete(ctx, webhook.DefaultConfigName, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	cfg, err := vwc.Get(ctx, name, metav1.GetOptions{})
	switch {
	case on && apierrors.IsNotFound(err):
		saved := b.saved.DeepCopy()
		saved.ResourceVersion = ""
		if _, err := vwc.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
			return err
		}
	case !on && err == nil:
		if b.null == nil {
			b.saved = cfg
		}
		if err := vwc.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		before, err := b.answered(ctx, m, "CREATE")
		if err != nil {
			return err
		}
		// A dry-run create reaches the webhook whenever it is installed (a
		// label does not: the configuration admits writes that leave the
		// spec alone without calling it) and stores nothing.
		_, err = b.aqs.Create(ctx, aqtest.Cohort("bench-probe", "root").Obj(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			continue // the CA bundle is not injected yet
		}
		after, err := b.answered(ctx, m, "CREATE")
		if err != nil {
			return err
		}
		if on == (after > before) {
			return nil
		}
	}
	return fmt.Errorf("the API server did not start or stop calling the webhook (on=%v) within a minute", on)
}

// answered is how many reviews of op (CREATE, or UPDATE: the null
// webhook counts every other operation with it) the webhook in use has
// answered.
func (b *bench) answered(ctx context.Context, m *localcluster.Manager, op string) (float64, error) {
	switch {
	case b.null == nil:
		return m.Metric(ctx, "ome_quota_webhook_verdicts_total", `operation="`+op+`"`)
	case op == "CREATE":
		return float64(b.null.creates.Load()), nil
	}
	return float64(b.null.others.Load()), nil
}

// startProfile fetches CPU profiles over b.profileFor, in the background:
// the manager's (--profiling, plain HTTP on its metrics port) into file,
// and the API server's (its /debug/pprof, as system:masters) into
// file.apiserver. The channel says how it went, once both are written.
func (b *bench) startProfile(ctx context.Context, m *localcluster.Manager, file string) <-chan error {
	secs := int(b.profileFor.Seconds())
	fetch := func(who, file string, get func() ([]byte, error)) error {
		data, err := get()
		if err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		fmt.Fprintf(os.Stderr, "the %s's CPU profile over %s from the first budget write: %s\n", who, b.profileFor, file)
		return nil
	}
	errs := make(chan error, 2)
	go func() {
		errs <- fetch("manager", file, func() ([]byte, error) { return m.CPUProfile(ctx, secs) })
	}()
	go func() {
		errs <- fetch("API server", file+".apiserver", func() ([]byte, error) { return b.c.APIServerCPUProfile(ctx, secs) })
	}()
	done := make(chan error, 1)
	go func() { done <- errors.Join(<-errs, <-errs) }()
	return done
}

func (b *bench) timed(ctx context.Context, name, patch string) (time.Duration, *v1beta1.AcceleratorQuota, error) {
	start := time.Now()
	aq, err := b.aqs.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return time.Since(start), aq, err
}

// statusWatch follows one AcceleratorQuota's status.observedGeneration.
type statusWatch struct {
	w       watch.Interface
	mu      sync.Mutex
	changed chan struct{}
	seen    int64
}

func (b *bench) watchStatus(ctx context.Context, name string) (*statusWatch, error) {
	w, err := b.aqs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return nil, err
	}
	s := &statusWatch{w: w, changed: make(chan struct{})}
	go func() {
		for ev := range w.ResultChan() {
			aq, ok := ev.Object.(*v1beta1.AcceleratorQuota)
			if !ok {
				continue
			}
			s.mu.Lock()
			s.seen = max(s.seen, aq.Status.ObservedGeneration)
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// await waits until the status describes generation gen.
func (s *statusWatch) await(ctx context.Context, gen int64) error {
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		seen, changed := s.seen, s.changed
		s.mu.Unlock()
		if seen >= gen {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("the manager did not write the status of generation %d within 10s (it shows %d)", gen, seen)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *statusWatch) stop() { s.w.Stop() }

// settle waits until the manager's state holds n nodes and its writes have
// stopped for two seconds.
func settle(ctx context.Context, m *localcluster.Manager, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	last, quiet := -1.0, 0
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		nodes, err := m.Metric(ctx, "ome_quota_nodes")
		if err != nil {
			return err
		}
		writes, err := m.Metric(ctx, "ome_quota_backend_writes_total")
		if err != nil {
			return err
		}
		if int(nodes) != n || writes != last {
			last, quiet = writes, 0
			continue
		}
		if quiet++; quiet >= 2 {
			return nil
		}
	}
	return fmt.Errorf("the manager did not settle on %d nodes in 10 minutes", n)
}

// quiesce waits, at most 3 minutes, until the control plane and the
// manager are idle (together under 10% of a core over 2 s): the manager
// settles once its own writes stop, but Kueue goes on reconciling a tree
// just built (a thousand ClusterQueues and more) for a while, and writes
// measured meanwhile share the 2 cores with that work, the webhook's more
// than the others (each crosses three processes).
func (b *bench) quiesce(ctx context.Context, m *localcluster.Manager) {
	pids := b.processes(m)
	delete(pids, "webhookbench")
	waited := localcluster.Quiesce(ctx, pids, 3*time.Minute)
	fmt.Fprintf(os.Stderr, "control plane idle after %s\n", waited.Round(100*time.Millisecond))
}

// quantile is the p-th percentile of d: the smallest duration that at
// least p% of d are at most (nearest rank).
func quantile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func pct(d []time.Duration, p int) string { return fmtDur(quantile(d, p)) }

func meanOf(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(max(len(d), 1))
}

func mean(d []time.Duration) string { return fmtDur(meanOf(d)) }

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// managerCounts are the manager's GC and tick counters.
type managerCounts struct{ gcs, gcMax, ticks float64 }

func (b *bench) managerCounters(ctx context.Context, m *localcluster.Manager) (managerCounts, error) {
	var c managerCounts
	var err error
	if c.gcs, err = m.Metric(ctx, "go_gc_duration_seconds_count"); err != nil {
		return c, err
	}
	if c.gcMax, err = m.Metric(ctx, "go_gc_duration_seconds", `quantile="1"`); err != nil {
		return c, err
	}
	c.ticks, err = m.Metric(ctx, "ome_quota_events_total", `kind="Tick"`)
	return c, err
}

// timedWrite is one budget write: how long the client waited, the
// generation the API server judged it on, and the resourceVersion it was
// stored at.
type timedWrite struct {
	d     time.Duration
	raise bool
	gen   int64
	rv    uint64
	// on: with the webhook; pos: the write's place in its block of 50;
	// at: when it was sent.
	on  bool
	pos int
	at  time.Time
}

// review is one review of a judged write, from the webhook's log at -v=2:
// the "judged" line (Ledger.Judge) and the "reviewed" line (the HTTP
// handler) of the same uid. base is the resourceVersion of the object the
// API server judged the write on; total is the judgement's time (waiting
// for the state, judging, and the ledger's compare-and-swap), handle the
// handler's.
type review struct {
	node, op, outcome string
	base              uint64
	total, handle     time.Duration
}

var logField = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// parseReviews reads the webhook's "judged" and "reviewed" lines (klog's
// text format) from a manager's log.
func parseReviews(log string) []review {
	var out []review
	handled := map[string]time.Duration{}
	at := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		judged, reviewed := strings.Contains(line, `] "judged"`), strings.Contains(line, `] "reviewed"`)
		if !judged && !reviewed {
			continue
		}
		f := map[string]string{}
		for _, m := range logField.FindAllStringSubmatch(line, -1) {
			f[m[1]] = strings.Trim(m[2], `"`)
		}
		dur := func(k string) time.Duration { d, _ := time.ParseDuration(f[k]); return d }
		if reviewed {
			if j, ok := at[f["uid"]]; ok {
				out[j].handle = dur("total")
			} else {
				handled[f["uid"]] = dur("total")
			}
			continue
		}
		base, _ := strconv.ParseUint(f["base"], 10, 64)
		r := review{node: f["node"], op: f["op"], outcome: f["outcome"], base: base, total: dur("total"), handle: handled[f["uid"]]}
		at[f["uid"]] = len(out)
		out = append(out, r)
	}
	return out
}

// byWrite assigns each review of an update of team to the budget write it
// judged: the first write, in the order sent, stored at a resourceVersion
// above the review's base (the API server judges a write on the object as
// stored before it, and again on a newer version when the object changed
// meanwhile, as when the manager's status write landed first). all is in
// the order sent, so its resourceVersions ascend.
func byWrite(team string, all []timedWrite, reviews []review) [][]review {
	out := make([][]review, len(all))
	for _, r := range reviews {
		if r.node != team || r.op != "UPDATE" {
			continue
		}
		i, _ := slices.BinarySearchFunc(all, r.base, func(w timedWrite, base uint64) int {
			if w.rv <= base {
				return -1
			}
			return 1
		})
		if i < len(all) {
			out[i] = append(out[i], r)
		}
	}
	return out
}

// explain says where the time of the budget writes with the webhook went,
// write by write: how often the API server called the webhook for it, how
// long the webhook's handler took, of which the judgement (for a raise,
// with the ledger's compare-and-swap), and the rest (the API server and
// etcd: the write's time less its reviews').
func explain(n int, team string, all []timedWrite, reviews []review) {
	blockStarts(n, all)
	type row struct {
		w                   timedWrite
		calls               int
		handle, judge, rest time.Duration
		outcomes            []string
	}
	var rows []row
	var handle, rest, raises, lowers, once, twice []time.Duration
	never := 0
	for i, rs := range byWrite(team, all, reviews) {
		w := all[i]
		if !w.on {
			continue
		}
		r := row{w: w, calls: len(rs)}
		for _, x := range rs {
			r.handle += x.handle
			r.judge += x.total
			r.outcomes = append(r.outcomes, x.outcome)
		}
		r.rest = w.d - r.handle
		rows = append(rows, r)
		handle, rest = append(handle, r.handle), append(rest, r.rest)
		if w.raise {
			raises = append(raises, r.judge)
		} else {
			lowers = append(lowers, r.judge)
		}
		switch {
		case r.calls == 0:
			never++
		case r.calls == 1:
			once = append(once, w.d)
		default:
			twice = append(twice, w.d)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "n=%d, budget writes with the webhook, from its log: %d judged once, %d more than once, %d never; "+
		"the webhook's handler per write p50 %s p99 %s, of which judging (raises, with the ledger's compare-and-swap: p50 %s p99 %s; lowerings: p50 %s p99 %s); "+
		"the rest (API server, etcd) p50 %s p99 %s\n",
		n, len(once), len(twice), never,
		pct(handle, 50), pct(handle, 99), pctOr(raises, 50), pctOr(raises, 99), pctOr(lowers, 50), pctOr(lowers, 99), pct(rest, 50), pct(rest, 99))
	fmt.Fprintf(os.Stderr, "  writes judged once: p50 %s p99 %s; more than once: p50 %s p99 %s\n",
		pctOr(once, 50), pctOr(once, 99), pctOr(twice, 50), pctOr(twice, 99))
	slices.SortFunc(rows, func(a, b row) int { return int(b.w.d - a.w.d) })
	fmt.Fprintf(os.Stderr, "  the slowest 2%%:\n")
	for _, r := range rows[:max(1, len(rows)/50)] {
		dir := map[bool]string{true: "raise", false: "lower"}[r.w.raise]
		fmt.Fprintf(os.Stderr, "    %s %s #%d: %d call(s) %v, handler %s (judging %s), rest %s\n",
			fmtDur(r.w.d), dir, r.w.pos, r.calls, r.outcomes, fmtDur(r.handle), fmtDur(r.judge), fmtDur(r.rest))
	}
}

// budgetPatch is the i-th budget write: the team's budget goes between 1
// and 0 (raised on even i, lowered on odd), and its Cohort's ten teams stay
// within its 10.
func budgetPatch(i int) string {
	return fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, (i+1)%2)
}

// attributeCPU sends budget writes back to back with the webhook off and
// then on, each mode for b.profileFor under CPU profiles of the manager and
// the API server, and prints what each process spent per write in each
// mode. It times no write: the latency figures come from the alternating
// blocks.
func (b *bench) attributeCPU(ctx context.Context, m *localcluster.Manager, n int, team string) error {
	pids := b.processes(m)
	names := slices.Sorted(maps.Keys(pids))
	i := 0
	for _, on := range []bool{false, true} {
		if err := b.setWebhook(ctx, m, on); err != nil {
			return err
		}
		mode := map[bool]string{false: "off", true: "on"}[on]
		profiled := b.startProfile(ctx, m, fmt.Sprintf("%s.%d.%s", b.attribute, n, mode))
		cpu0, writes := localcluster.CPUTimes(pids), 0
		for deadline := time.Now().Add(b.profileFor); time.Now().Before(deadline); writes++ {
			i++
			if _, _, err := b.timed(ctx, team, budgetPatch(i)); err != nil {
				return fmt.Errorf("budget write %d (webhook %s): %w", i, mode, err)
			}
		}
		cpu1 := localcluster.CPUTimes(pids)
		if err := <-profiled; err != nil {
			return err
		}
		line := fmt.Sprintf("n=%d, webhook %s, %d budget writes in %s, CPU per write:", n, mode, writes, b.profileFor)
		for _, name := range names {
			line += fmt.Sprintf(" %s %.2fms;", name, ms(cpu1[name]-cpu0[name], writes))
		}
		fmt.Fprintln(os.Stderr, line)
	}
	return nil
}

// keep writes the manager's log to file.log and the budget writes, one a
// line, to file.writes.
func keep(file string, log []byte, writes []timedWrite) error {
	if err := os.WriteFile(file+".log", log, 0o644); err != nil {
		return err
	}
	var out strings.Builder
	for _, w := range writes {
		fmt.Fprintf(&out, "%s\t%v\t%v\t%d\t%d\t%s\n", w.at.UTC().Format(time.RFC3339Nano), w.on, w.raise, w.pos, w.gen, fmtDur(w.d))
	}
	return os.WriteFile(file+".writes", []byte(out.String()), 0o644)
}

// blockStarts says, in each mode, where in their blocks of 50 the slowest
// 2% of the budget writes fell (#0 is a block's first write, sent right
// after the webhook configuration changed and the bench read the metrics).
func blockStarts(n int, all []timedWrite) {
	for _, on := range []bool{false, true} {
		var ws []timedWrite
		for _, w := range all {
			if w.on == on {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		slices.SortFunc(ws, func(a, b timedWrite) int { return int(b.d - a.d) })
		var at []string
		for _, w := range ws[:max(1, len(ws)/50)] {
			at = append(at, fmt.Sprintf("#%d %s", w.pos, fmtDur(w.d)))
		}
		fmt.Fprintf(os.Stderr, "n=%d, the slowest 2%% of the budget writes, webhook %v, by place in their block: %s\n", n, on, strings.Join(at, ", "))
	}
}

func pctOr(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	return pct(d, p)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ms(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(max(n, 1)) }

// processes are the processes whose CPU a write costs: etcd,
// kube-apiserver and Kueue, and the manager; the bench itself is
// "webhookbench".
func (b *bench) processes(m *localcluster.Manager) map[string]int {
	out := b.c.Processes()
	out["manager"], out["webhookbench"] = m.Pid(), os.Getpid()
	return out
}
