package state

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPurity keeps the core pure: state and events import no client-go (the
// informer adapters in events/sources may import client-go's tools/cache,
// and nothing else of it), no randomness and no network, and state reads no
// clock.
func TestPurity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	forbidden := []string{"math/rand", "math/rand/v2", "net", "net/http", "os/exec"}
	for _, pkg := range []string{"ome.io/quota-manager/state", "ome.io/quota-manager/events", "ome.io/quota-manager/events/sources"} {
		adapters := strings.HasSuffix(pkg, "/sources")
		for _, imp := range goList(t, `{{join .Imports " "}}`, pkg) {
			if slices.Contains(forbidden, imp) {
				t.Errorf("%s imports %s: the core has no randomness and no network", pkg, imp)
			}
			if adapters && strings.HasPrefix(imp, "k8s.io/client-go") && imp != "k8s.io/client-go/tools/cache" {
				t.Errorf("%s imports %s: the adapters use client-go's tools/cache only", pkg, imp)
			}
		}
		if adapters {
			continue
		}
		for _, dep := range goList(t, `{{join .Deps " "}}`, pkg) {
			for _, shell := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "sigs.k8s.io/kueue", "ome.io/quota-manager/events/sources"} {
				if strings.HasPrefix(dep, shell) {
					t.Errorf("%s depends on %s, which belongs to the shell", pkg, dep)
				}
			}
		}
	}

	// No clock in state: time arrives in events.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []string{"time.Now(", "time.Since(", "time.Until(", "time.After", "time.Tick", "time.NewTimer", "time.NewTicker", "time.Sleep("} {
			if strings.Contains(string(src), call) {
				t.Errorf("%s calls %s: the reducer reads time from events only", f, call)
			}
		}
	}
}

func goList(t *testing.T, format, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, pkg).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v %s", pkg, err, msg)
	}
	return strings.Fields(string(out))
}
