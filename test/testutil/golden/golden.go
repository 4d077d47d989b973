// Package golden is the test kit's one way to compare a test's output
// with a file under the package's testdata/ folder, and its one -update
// flag, which rewrites the files instead: go test ./PKG -run TEST -update
// (or -args -update where the package's tests take other arguments).
// It imports nothing but the standard library and go-cmp, so that unit
// tests of product packages use it as the control-plane tests do.
package golden

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ instead of comparing with them")

// Updating reports whether the test runs with -update.
func Updating() bool { return *update }

// Diff compares got with testdata/name and returns "" when they are the
// same, else what differs (-want +got) and how to accept the change. With
// -update it writes got to the file first, creating its folders.
func Diff(t testing.TB, name, got string) string {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run the test with -update to write it", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		return path + " differs (-want +got); if the change is intended, run the test with -update:\n" + d
	}
	return ""
}

// Check fails the test when got differs from testdata/name.
func Check(t testing.TB, name, got string) {
	t.Helper()
	if d := Diff(t, name, got); d != "" {
		t.Error(d)
	}
}

// CheckJSON is Check of v as indented JSON, with a final newline.
func CheckJSON(t testing.TB, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	Check(t, name, string(b)+"\n")
}
