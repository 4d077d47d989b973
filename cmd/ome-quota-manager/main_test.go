package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// captureStderr runs f with standard error redirected and returns it.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	f()
	os.Stderr = old
	w.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, r)
	return b.String()
}

func TestBadFlagsExit2NamingTheFlag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"no mode":               {nil, "--mode is required"},
		"management, no member": {[]string{"--mode=management"}, "--mode=management needs --members-from"},
		"unknown flag":          {[]string{"--mode=workload", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		"not a number":          {[]string{"--mode=workload", "--max-tree-depth=deep"}, `invalid argument "deep" for "--max-tree-depth"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var code int
			out := captureStderr(t, func() { code = run(tc.args) })
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("stderr %q does not contain %q", out, tc.want)
			}
		})
	}
}
