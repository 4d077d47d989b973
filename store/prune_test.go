package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPruneSiblings(t *testing.T) {
	parent := t.TempDir()
	now := time.Now()
	old := now.Add(-200 * time.Hour)
	mk := func(name string, from, to uint64, at time.Time) string {
		dir := filepath.Join(parent, name)
		write(t, dir, Options{}, from, to)
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			require.NoError(t, os.Chtimes(filepath.Join(dir, e.Name()), at, at))
		}
		return dir
	}
	self := mk("pod-a", 1, 5, old)   // this process's own: never removed
	gone := mk("pod-b", 1, 5, old)   // a pod that no longer exists
	recent := mk("pod-c", 1, 5, now) // written within the bound
	live := mk("pod-d", 1, 5, old)   // held by a running process
	// Logs with a log of verdicts inside: removed when both are old,
	// kept while the verdicts are recent.
	gone2 := mk("pod-e", 1, 5, old)
	mk(filepath.Join("pod-e", VerdictsDir), 1, 3, old)
	mk(filepath.Join("pod-e", AuthenticatedVerdictsDir), 1, 3, old)
	judging := mk("pod-f", 1, 5, old)
	mk(filepath.Join("pod-f", VerdictsDir), 1, 3, now)
	authenticated := mk("pod-g", 1, 5, old)
	mk(filepath.Join("pod-g", VerdictsDir), 1, 3, old)
	mk(filepath.Join("pod-g", AuthenticatedVerdictsDir), 1, 3, now)
	other := filepath.Join(parent, "notes")
	require.NoError(t, os.MkdirAll(other, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(other, "LOCK"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(other, "readme.txt"), []byte("x"), 0o600))
	require.NoError(t, os.Chtimes(filepath.Join(other, "readme.txt"), old, old))
	l, err := Open(live, Options{})
	require.NoError(t, err)
	defer l.Close()
	lockFile := filepath.Join(live, lockName)
	require.NoError(t, os.Chtimes(lockFile, old, old))
	segs, _ := listSegments(live)
	for _, s := range segs {
		require.NoError(t, os.Chtimes(s.path, old, old))
	}

	removed, err := PruneSiblings(self, 168*time.Hour, now)
	require.NoError(t, err)
	require.Equal(t, []string{gone, gone2}, removed)
	for _, d := range []string{self, recent, live, other, judging, authenticated} {
		_, err := os.Stat(d)
		require.NoError(t, err, "%s was removed", d)
	}
	_, err = os.Stat(gone)
	require.True(t, os.IsNotExist(err))

	removed, err = PruneSiblings(self, 0, now)
	require.NoError(t, err)
	require.Empty(t, removed, "no bound, nothing removed")
}
