// Package testutil holds the small helpers that the control-plane test
// packages share: polling for an outcome, and comparing kubectl tables.
package testutil

import (
	"strings"
	"testing"
	"time"
)

// Eventually polls f until it returns "" (success) or the timeout passes,
// then fails the test with f's last complaint.
func Eventually(t testing.TB, timeout time.Duration, f func() string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = f(); last == "" {
			return
		}
	}
	t.Fatalf("after %s: %s", timeout, last)
}

// Normalize trims a kubectl table and collapses runs of spaces, as column
// widths vary with the content.
func Normalize(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}
