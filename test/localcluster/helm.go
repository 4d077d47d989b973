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

// EnsureHelm returns the path of the helm v4 binary built from tools/kube
// with the other tools (EnsureBinaries), building them first when they are
// not cached.
func EnsureHelm(ctx context.Context) (string, error) {
	if p := os.Getenv(HelmEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", HelmEnv, p, err)
		}
		return p, nil
	}
	dir, err := EnsureBinaries(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "helm"), nil
}
