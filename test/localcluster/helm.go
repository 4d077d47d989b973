package localcluster

import (
	"context"
	"path/filepath"
)

// EnsureHelm returns the path of the helm v4 binary built from tools/kube
// with the other tools (EnsureBinaries), building them first when they are
// not cached.
func EnsureHelm(ctx context.Context) (string, error) {
	dir, err := EnsureBinaries(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "helm"), nil
}
