package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HelmEnv names the environment variable that points at an already built
// helm binary, which skips the build step.
const HelmEnv = "OME_HELM"

// EnsureHelm returns the path of the helm v4 binary built from tools/helm,
// building it first (`hack/tools.sh helm`, a few minutes cold) when it is
// not cached. The build's progress goes to standard error.
func EnsureHelm(ctx context.Context) (string, error) {
	if p := os.Getenv(HelmEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", HelmEnv, p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "tools.sh"), "helm")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building helm (hack/tools.sh helm) failed: %w; its output above says why", err)
	}
	var last string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	p := filepath.Join(last, "helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("hack/tools.sh helm printed %q: %w", last, err)
	}
	return p, nil
}
