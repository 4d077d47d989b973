package main

import (
	"fmt"
	"slices"
	"time"
)

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
