package main

import (
	"flag"
	"strings"
	"testing"
)

// -only match's switches are refused without it, a malformed value is
// refused with the form it wants, and a good -match-limits sets the limits
// both runs use.
func TestCheckMatchFlags(t *testing.T) {
	set := func(name, value string) {
		t.Helper()
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	defer func(q, b, w int) { matchQPS, matchBurst, matchWorkers = q, b, w }(matchQPS, matchBurst, matchWorkers)

	set("match-limits", "300,600,16")
	if err := checkMatchFlags(""); err == nil || !strings.Contains(err.Error(), "-match-limits works with -only match alone") {
		t.Errorf("-match-limits without -only match: got %v", err)
	}
	if err := checkMatchFlags("match"); err != nil {
		t.Fatalf("-only match -match-limits 300,600,16: %v", err)
	}
	if matchQPS != 300 || matchBurst != 600 || matchWorkers != 16 {
		t.Errorf("limits after -match-limits 300,600,16: QPS %d, burst %d, workers %d", matchQPS, matchBurst, matchWorkers)
	}
	for value, want := range map[string]string{
		"300,600":      "want QPS,BURST,WORKERS",
		"300,x,16":     `"x" is not a whole number above 0`,
		"300,600,0":    `"0" is not a whole number above 0`,
		"300,600,16,1": "want QPS,BURST,WORKERS",
	} {
		set("match-limits", value)
		if err := checkMatchFlags("match"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-match-limits %s: got %v, want an error with %q", value, err, want)
		}
	}
}
