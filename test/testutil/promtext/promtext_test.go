package promtext

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const page = `# HELP writes_total Writes.
# TYPE writes_total counter
writes_total{kind="status",verb="apply"} 3
writes_total{kind="status",verb="delete"} 1
writes_total{kind="cq",verb="apply"} 5
# HELP waiting Reviews waiting.
# TYPE waiting gauge
waiting 2
# HELP gc GC pauses.
# TYPE gc summary
gc{quantile="0.5"} 0.001
gc{quantile="1"} 0.004
gc_sum 0.01
gc_count 5
# HELP d Durations.
# TYPE d histogram
d_bucket{op="UPDATE",subresource="",le="0.005"} 1
d_bucket{op="UPDATE",subresource="",le="0.1"} 3
d_bucket{op="UPDATE",subresource="",le="+Inf"} 4
d_sum{op="UPDATE",subresource=""} 0.5
d_count{op="UPDATE",subresource=""} 4
d_bucket{op="CREATE",subresource="",le="0.005"} 2
d_bucket{op="CREATE",subresource="",le="0.1"} 2
d_bucket{op="CREATE",subresource="",le="+Inf"} 2
d_sum{op="CREATE",subresource=""} 0.002
d_count{op="CREATE",subresource=""} 2
`

func TestSumAndHistogram(t *testing.T) {
	f, err := ParseString(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		family string
		match  []string
		want   float64
	}{
		{"writes_total", nil, 9},
		{"writes_total", []string{`kind="status"`}, 4},
		{"writes_total", []string{`kind="status"`, `verb="apply"`}, 3},
		{"writes_total", []string{`kind="none"`}, 0},
		{"waiting", nil, 2},
		{"absent", nil, 0},
		{"d_count", []string{`op="UPDATE"`}, 4},
		{"d_sum", nil, 0.502},
		{"d_bucket", []string{`op="UPDATE"`, `le="0.1"`}, 3},
		{"d_bucket", []string{`le="0.00`}, 3},
		{"d_bucket", []string{`le="+Inf"`}, 6},
		{"gc", []string{`quantile="1"`}, 0.004},
		{"gc_count", nil, 5},
	} {
		if got := f.Sum(c.family, c.match...); got != c.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", c.family, c.match, got, c.want)
		}
	}
	count, sum, buckets := f.Histogram("d", `op="UPDATE"`, `subresource=""`)
	if count != 4 || sum != 0.5 {
		t.Errorf("UPDATE: count %v sum %v, want 4 and 0.5", count, sum)
	}
	if d := cmp.Diff(map[float64]float64{0.005: 1, 0.1: 3, math.Inf(1): 4}, buckets); d != "" {
		t.Errorf("UPDATE buckets (-want +got):\n%s", d)
	}
	count, _, buckets = f.Histogram("d")
	if count != 6 || buckets[0.005] != 3 {
		t.Errorf("all: count %v, within 5 ms %v; want 6 and 3", count, buckets[0.005])
	}
	if _, err := ParseString("not a metric page {"); err == nil {
		t.Error("a page that is not Prometheus text parsed")
	}
}
