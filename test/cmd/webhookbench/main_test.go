package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"ome.io/quota-manager/test/testutil/promtext"
)

// The webhook's "judged" and "reviewed" lines, as klog's text format
// writes them at -v=2, become one review each.
func TestParseReviews(t *testing.T) {
	log := `I1201 09:05:20.371324    4704 ledger.go:84] "judged" uid="u1" node="team-1" op="UPDATE" base="1051" allowed=true failed=false outcome="reserved" total="3.5ms"
I1201 09:05:20.371400    4704 server.go:223] "reviewed" uid="u1" verdict="allowed" total="4.1ms"
I1201 09:05:20.380000    4704 server.go:223] "reviewed" uid="u2" verdict="allowed" total="0.9ms"
I1201 09:05:20.380100    4704 ledger.go:84] "judged" uid="u2" node="team-1" op="UPDATE" base="1060" allowed=true failed=false outcome="lowering" total="61.63µs"
I1201 09:05:20.390000    4704 other.go:1] "unrelated" uid="u3"`
	got := parseReviews(log)
	want := []review{
		{node: "team-1", op: "UPDATE", outcome: "reserved", base: 1051, total: 3500 * time.Microsecond, handle: 4100 * time.Microsecond},
		{node: "team-1", op: "UPDATE", outcome: "lowering", base: 1060, total: 61630 * time.Nanosecond, handle: 900 * time.Microsecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d reviews, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("review %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A review belongs to the first write stored above its base: a write
// judged again after a status write landed has two reviews, a write
// without the webhook none, and reviews of other nodes or of creates
// belong to no write.
func TestByWrite(t *testing.T) {
	writes := []timedWrite{{rv: 100}, {rv: 110}, {rv: 120}, {rv: 130}}
	reviews := []review{
		{node: "t", op: "UPDATE", base: 95, outcome: "a"},
		{node: "t", op: "UPDATE", base: 100, outcome: "b"},
		{node: "t", op: "UPDATE", base: 104, outcome: "c"}, // after a status write
		{node: "other", op: "UPDATE", base: 112},
		{node: "t", op: "CREATE", base: 0},
		{node: "t", op: "UPDATE", base: 121, outcome: "d"},
		{node: "t", op: "UPDATE", base: 130, outcome: "late"}, // after the last write
	}
	got := byWrite("t", writes, reviews)
	want := [][]string{{"a"}, {"b", "c"}, nil, {"d"}}
	for i := range want {
		var o []string
		for _, r := range got[i] {
			o = append(o, r.outcome)
		}
		if !slices.Equal(o, want[i]) {
			t.Errorf("write %d: reviews %v, want %v", i, o, want[i])
		}
	}
}

// The buckets of a histogram's matching series are summed by bound, and
// the quantile is interpolated within its bucket as histogram_quantile
// does.
func TestHistQuantile(t *testing.T) {
	text := `# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="false",type="validating",le="0.005"} 180
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="false",type="validating",le="0.025"} 196
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="false",type="validating",le="0.1"} 198
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="false",type="validating",le="+Inf"} 198
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="true",type="validating",le="0.005"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="true",type="validating",le="0.025"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="true",type="validating",le="0.1"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="UPDATE",rejected="true",type="validating",le="+Inf"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="w",operation="CREATE",rejected="false",type="validating",le="+Inf"} 50
apiserver_admission_webhook_admission_duration_seconds_sum{name="w",operation="UPDATE",rejected="false",type="validating"} 0.5
apiserver_admission_webhook_admission_duration_seconds_count{name="w",operation="UPDATE",rejected="false",type="validating"} 198
`
	f, err := promtext.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	h := buckets(f, apiserverWebhook, `name="w"`, webhookUpdates)
	if h.count() != 200 || h.within(0.005) != 182 {
		t.Fatalf("buckets %v", h)
	}
	// The 198th of 200 is the 16th of the 16 in (5ms, 25ms]: 5 + 20*16/16.
	if est, lo, hi, ok := h.quantile(0.99); !ok || math.Abs(est-0.025) > 1e-9 || lo != 0.005 || hi != 0.025 {
		t.Errorf("p99 %v in (%v, %v], %v", est, lo, hi, ok)
	}
	// The 100th is in the first bucket, from 0: 5 * 100/182.
	if est, _, _, _ := h.quantile(0.5); math.Abs(est-0.005*100/182) > 1e-9 {
		t.Errorf("p50 %v", est)
	}
	if sum, count := histogram(f, apiserverWebhook, `name="w"`, webhookUpdates); sum != 0.5 || count != 198 {
		t.Errorf("sum %v count %v", sum, count)
	}
	if _, _, _, ok := (hist{}).quantile(0.99); ok {
		t.Error("a quantile of no observations")
	}
	if est, _, _, _ := (hist{0.005: 1, math.Inf(1): 100}).quantile(0.99); est != 0.005 {
		t.Errorf("in the +Inf bucket: %v, want the highest bound", est)
	}
}

// keep writes the manager's log as it is and one line per budget write.
func TestKeep(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run.1000")
	at := time.Date(2026, 11, 30, 15, 5, 34, 710045206, time.UTC)
	writes := []timedWrite{
		{d: 50740 * time.Microsecond, raise: true, gen: 54, on: true, pos: 3, at: at},
		{d: 5120 * time.Microsecond, gen: 55, pos: 4, at: at.Add(51 * time.Millisecond)},
	}
	if err := keep(file, []byte("the log\n"), writes); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(file + ".log")
	if err != nil || string(log) != "the log\n" {
		t.Errorf("log %q, %v", log, err)
	}
	got, err := os.ReadFile(file + ".writes")
	if err != nil {
		t.Fatal(err)
	}
	want := "2026-11-30T15:05:34.710045206Z\ttrue\ttrue\t3\t54\t50.74ms\n" +
		"2026-11-30T15:05:34.761045206Z\tfalse\tfalse\t4\t55\t5.12ms\n"
	if string(got) != want {
		t.Errorf("writes:\n%s\nwant:\n%s", got, want)
	}
}
