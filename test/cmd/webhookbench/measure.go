package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

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

// budgetPatch is the i-th budget write: the team's budget goes between 1
// and 0 (raised on even i, lowered on odd), and its Cohort's ten teams stay
// within its 10.
func budgetPatch(i int) string {
	return fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, (i+1)%2)
}
