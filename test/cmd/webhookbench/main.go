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
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"

	quotaclient "ome.io/quota-manager/api/client"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
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
