package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	last, err := runTools(ctx, "helm")
	if err != nil {
		return "", fmt.Errorf("building helm (hack/tools.sh helm) failed: %w; its output above says why", err)
	}
	p := filepath.Join(last, "helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("hack/tools.sh helm printed %q: %w", last, err)
	}
	return p, nil
}
