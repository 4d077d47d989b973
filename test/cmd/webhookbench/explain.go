package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"ome.io/quota-manager/test/localcluster"
)

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
