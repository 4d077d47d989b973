package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The webhook's "judged" and "reviewed" lines, as klog's text format
// writes them at -v=2, become one review each.
func TestParseReviews(t *testing.T) {
	log := `I1130 09:05:20.371324    4704 record.go:248] "judged" uid="u1" node="team-1" op="UPDATE" generation=1051 allowed=true failed=false outcome="written" attempts=1 total="3.5ms" decide="40µs" record="3.2ms" read="0s"
I1130 09:05:20.371400    4704 server.go:276] "reviewed" uid="u1" verdict="allowed" total="4.1ms"
I1130 09:05:20.380000    4704 server.go:276] "reviewed" uid="u2" verdict="allowed" total="0.9ms"
I1130 09:05:20.380100    4704 record.go:248] "judged" uid="u2" node="team-1" op="UPDATE" generation=1052 allowed=true failed=false outcome="skipped" attempts=0 total="61.63µs" decide="0s" record="0s" read="0s"
I1130 09:05:20.390000    4704 other.go:1] "unrelated" uid="u3"`
	got := parseReviews(log)
	want := []review{
		{node: "team-1", outcome: "written", gen: 1051, total: 3500 * time.Microsecond, decide: 40 * time.Microsecond, record: 3200 * time.Microsecond, handle: 4100 * time.Microsecond},
		{node: "team-1", outcome: "skipped", gen: 1052, total: 61630 * time.Nanosecond, handle: 900 * time.Microsecond},
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
