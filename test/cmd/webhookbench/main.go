// Command webhookbench measures what the admission webhook adds to a write
// of the quota tree, on the local control plane: sequential budget updates
// of one team, and label-only updates, with the API server calling the
// webhook and not, in alternating blocks of 50 against the same running
// manager, at each tree size.
//
//	go run ./test/cmd/webhookbench [-sizes 1000,5000] [-updates 500]
//
// It prints p50, p90, p99 and the mean per size, mode and kind of write.
// It is not run by `make test`: it takes several minutes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	quotaclient "ome.io/quota-manager/api/client"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
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
	b := &bench{c: c, bin: bin, aqs: aqs, updates: *updates}
	// The manager creates root: start one without the webhook to do it.
	m, err := b.start(ctx, 0)
	if err != nil {
		return err
	}
	m.Stop()

	fmt.Printf("%-6s %-10s %-8s %9s %9s %9s %9s\n", "aqs", "webhook", "write", "p50", "p90", "p99", "mean")
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "growing the tree to %d AcceleratorQuotas...\n", n)
		if err := b.grow(ctx, n); err != nil {
			return err
		}
		res, err := b.measure(ctx, n)
		if err != nil {
			return err
		}
		for _, kind := range []string{"budget", "label"} {
			for _, on := range []bool{false, true} {
				mode := "off"
				if on {
					mode = "on"
				}
				d := res[kind][on]
				fmt.Printf("%-6d %-10s %-8s %9s %9s %9s %9s\n", n, mode, kind, pct(d, 50), pct(d, 90), pct(d, 99), mean(d))
			}
		}
	}
	return nil
}

type write struct{ cohort, team string }

type bench struct {
	c       *localcluster.Cluster
	bin     string
	aqs     aqtyped.AcceleratorQuotaInterface
	updates int
	size    int // nodes written so far, root included
	saved   *admissionregistrationv1.ValidatingWebhookConfiguration
}

// start starts a manager, with the webhook on port (0: without it), and
// waits until it is ready.
func (b *bench) start(ctx context.Context, port int) (*localcluster.Manager, error) {
	args := []string{"--leader-elect=false"}
	if port == 0 {
		args = append(args, "--webhook=false")
	} else {
		args = append(args, localcluster.WebhookFlags(port)...)
	}
	return b.c.StartManager(ctx, b.bin, fmt.Sprintf("bench-%d", port), b.c.Dir, args...)
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
func (b *bench) measure(ctx context.Context, n int) (map[string]map[bool][]time.Duration, error) {
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
	team := "bench-cohort-0000-team-1"
	out := map[string]map[bool][]time.Duration{"budget": {}, "label": {}}
	patches := map[string]func(i int) string{
		// The team's budget goes between 1 and 0: its Cohort's ten teams
		// stay within its 10.
		"budget": func(i int) string {
			return fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, (i+1)%2)
		},
		"label": func(i int) string { return fmt.Sprintf(`{"metadata":{"labels":{"bench":"%d"}}}`, i) },
	}
	const block = 50
	i := 0
	for _, kind := range []string{"budget", "label"} {
		wait0, _ := m.Metric(ctx, "ome_quota_webhook_settle_wait_seconds_sum")
		sum0, _ := m.Metric(ctx, "ome_quota_webhook_review_seconds_sum")
		count0, _ := m.Metric(ctx, "ome_quota_webhook_review_seconds_count")
		api0, apiN0 := b.webhookCalls(ctx)
		report := func() {
			sum, _ := m.Metric(ctx, "ome_quota_webhook_review_seconds_sum")
			count, _ := m.Metric(ctx, "ome_quota_webhook_review_seconds_count")
			api, apiN := b.webhookCalls(ctx)
			wait, _ := m.Metric(ctx, "ome_quota_webhook_settle_wait_seconds_sum")
			fmt.Fprintf(os.Stderr, "n=%d, %s writes: the API server's webhook calls: %d, mean %.2fms; the webhook's reviews: %d, mean %.2fms, of which waiting for the state %.2fms\n",
				n, kind, int(apiN-apiN0), 1000*(api-api0)/max(apiN-apiN0, 1), int(count-count0), 1000*(sum-sum0)/max(count-count0, 1), 1000*(wait-wait0)/max(count-count0, 1))
		}
		for done := 0; done < b.updates; done += block {
			for _, on := range []bool{false, true} {
				if err := b.setWebhook(ctx, m, on); err != nil {
					return nil, err
				}
				judged, err := m.Metric(ctx, "ome_quota_webhook_verdicts_total", `operation="UPDATE"`)
				if err != nil {
					return nil, err
				}
				for range min(block, b.updates-done) {
					i++
					d, err := b.timed(ctx, team, patches[kind](i))
					if err != nil {
						return nil, fmt.Errorf("%s update %d (webhook %v): %w", kind, i, on, err)
					}
					out[kind][on] = append(out[kind][on], d)
				}
				after, err := m.Metric(ctx, "ome_quota_webhook_verdicts_total", `operation="UPDATE"`)
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
		report()
	}
	return out, nil
}

// webhookCalls is the API server's total time in calls of the webhook,
// and their number.
func (b *bench) webhookCalls(ctx context.Context) (sum, count float64) {
	raw, err := b.c.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0
	}
	return histogram(string(raw), "apiserver_admission_webhook_admission_duration_seconds", `name="`+webhook.WebhookName+`"`)
}

// histogram sums the _sum and _count series of a histogram whose labels
// include match.
func histogram(text, family, match string) (sum, count float64) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, match) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, family+"_sum{"):
			sum += v
		case strings.HasPrefix(line, family+"_count{"):
			count += v
		}
	}
	return sum, count
}

// setWebhook installs or removes the webhook configuration and waits until
// the API server acts on it: a write of a probe label is judged by the
// webhook, or not.
func (b *bench) setWebhook(ctx context.Context, m *localcluster.Manager, on bool) error {
	vwc := b.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := vwc.Get(ctx, webhook.DefaultConfigName, metav1.GetOptions{})
	switch {
	case on && apierrors.IsNotFound(err):
		saved := b.saved.DeepCopy()
		saved.ResourceVersion = ""
		if _, err := vwc.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
			return err
		}
	case !on && err == nil:
		b.saved = cfg
		if err := vwc.Delete(ctx, webhook.DefaultConfigName, metav1.DeleteOptions{}); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		before, err := m.Metric(ctx, "ome_quota_webhook_verdicts_total", `operation="CREATE"`)
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
		after, err := m.Metric(ctx, "ome_quota_webhook_verdicts_total", `operation="CREATE"`)
		if err != nil {
			return err
		}
		if on == (after > before) {
			return nil
		}
	}
	return fmt.Errorf("the API server did not start or stop calling the webhook (on=%v) within a minute", on)
}

func (b *bench) timed(ctx context.Context, name, patch string) (time.Duration, error) {
	start := time.Now()
	_, err := b.aqs.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return time.Since(start), err
}

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

func pct(d []time.Duration, p int) string {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return fmtDur(s[max(0, min(len(s)-1, i-1))])
}

func mean(d []time.Duration) string {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return fmtDur(sum / time.Duration(len(d)))
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }
