package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

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

func pct(d []time.Duration, p int) string {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(time.Millisecond).String()
}
