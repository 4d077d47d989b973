package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMakePluginBuildsThisMachinesBinaryOnly runs `make plugin` into a
// temporary folder: it builds the one binary a newcomer needs, and no krew
// archive (those are `make plugin-krew`'s).
func TestMakePluginBuildsThisMachinesBinaryOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make unit): links a release binary through make; make test runs it")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed to run the README's commands: %v", err)
	}
	dir := t.TempDir()
	bin, dist := filepath.Join(dir, "bin"), filepath.Join(dir, "dist")
	cmd := exec.Command("make", "-C", "../..", "plugin", "BIN_DIR="+bin, "DIST_DIR="+dist)
	cmd.Env = append(os.Environ(), "BIN_DIR="+bin, "DIST_DIR="+dist)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	st, err := os.Stat(filepath.Join(bin, "kubectl-ome"))
	require.NoError(t, err, "make plugin built no %s/kubectl-ome:\n%s", bin, out)
	require.NotZero(t, st.Mode()&0o111, "kubectl-ome is not executable")
	_, err = os.Stat(dist)
	require.True(t, os.IsNotExist(err), "make plugin wrote %s, the krew archives' folder:\n%s", dist, out)
	version, err := exec.Command(filepath.Join(bin, "kubectl-ome"), "--help").CombinedOutput()
	require.NoError(t, err, "%s", version)
	require.Contains(t, string(version), "quota")
}
