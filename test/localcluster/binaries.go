package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ToolsDirEnv names the environment variable that points at a folder of
// already built binaries, which skips the build step.
const ToolsDirEnv = "OME_TOOLS_DIR"

// RepoRoot returns the root of this repository: the nearest folder, from
// the working directory up, whose go.mod declares module ome.io/quota-manager.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module ome.io/quota-manager\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the ome-quota-manager repository: run from its checkout")
		}
		dir = parent
	}
}

// EnsureBinaries returns the folder holding etcd, kube-apiserver, kubectl,
// kueue, helm, prometheus, promtool and Kueue's manifests, building them
// first when they are not cached.
// The build's progress goes to standard error.
func EnsureBinaries(ctx context.Context) (string, error) {
	if dir := os.Getenv(ToolsDirEnv); dir != "" {
		if err := checkBinaries(dir); err != nil {
			return "", fmt.Errorf("%s=%s: %w", ToolsDirEnv, dir, err)
		}
		return dir, nil
	}
	last, err := runTools(ctx)
	if err != nil {
		return "", fmt.Errorf("building the control plane binaries (hack/tools.sh) failed: %w; its output above says why", err)
	}
	if err := checkBinaries(last); err != nil {
		return "", fmt.Errorf("hack/tools.sh printed %q: %w", last, err)
	}
	return last, nil
}

// runTools runs hack/tools.sh, its progress on standard error, and returns
// the last line it printed: the folder that holds what it built.
func runTools(ctx context.Context) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "tools.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	var last string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	return last, nil
}

func checkBinaries(dir string) error {
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl", "kueue", "helm", "prometheus", "promtool", "kueue-crds", "kueue-webhooks.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("missing %s: run hack/tools.sh (or make tools) to build it", name)
		}
	}
	return nil
}
