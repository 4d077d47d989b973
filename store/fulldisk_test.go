package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ome.io/quota-manager/events"
)

// TestFullDisk records through a Recorder onto a 256 KiB tmpfs that a file
// then fills, and frees again: the events that could not be written are
// reported, no empty segment is left behind, no event is read twice,
// readers report the gap, and recording resumes once there is room.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	logDir := filepath.Join(dir, "events")
	// The log's clock, moved by the test: a failed start of a segment is
	// tried again only after its backoff.
	var clockMu sync.Mutex
	clock := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	l, err := Open(logDir, Options{MaxSegmentBytes: 16 << 10, Sync: SyncAlways, Now: now})
	require.NoError(t, err)
	var mu sync.Mutex
	failed := map[uint64]bool{}
	var reasons []string
	rec := NewRecorder(l, 64, func(ev events.Event, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed[ev.Seq] = true
		reasons = append(reasons, err.Error())
	})
	seq := uint64(1)
	record := func(n int) {
		for range n {
			rec.Record(sample(seq))
			seq++
		}
		rec.Wait(seq - 1)
	}
	record(100)
	require.Empty(t, failed)

	// Fill the filesystem, then keep recording: writes, rotations and
	// their headers fail.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	for buf := make([]byte, 4096); ; {
		if _, err := filler.Write(buf); err != nil {
			require.ErrorIs(t, err, unix.ENOSPC)
			break
		}
	}
	require.NoError(t, filler.Close())
	record(300)
	mu.Lock()
	require.NotEmpty(t, failed, "a full disk refused nothing")
	require.True(t, slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "no space left on device") }), "%v", reasons)
	require.True(t, slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "tries again to start a segment in 100ms") }),
		"no event was refused while a failed start waited for its backoff: %v", reasons)
	mu.Unlock()

	// Room again: recording resumes.
	require.NoError(t, os.Remove(filepath.Join(dir, "filler")))
	clockMu.Lock()
	clock = clock.Add(time.Minute) // past the longest backoff
	clockMu.Unlock()
	resumed := seq
	record(100)
	require.NoError(t, rec.Close())

	segs, err := listSegments(logDir)
	require.NoError(t, err)
	for _, s := range segs {
		info, err := os.Stat(s.path)
		require.NoError(t, err)
		require.Greater(t, info.Size(), int64(headerSize), "segment %s holds no record", s.name)
	}
	ents, err := os.ReadDir(logDir)
	require.NoError(t, err)
	for _, e := range ents {
		require.True(t, e.Name() == lockName || strings.HasSuffix(e.Name(), segmentExt), "left behind: %s", e.Name())
	}

	seqs, rep := readAll(t, logDir, 0)
	require.True(t, slices.IsSorted(seqs) && len(slices.Compact(slices.Clone(seqs))) == len(seqs), "an event was read twice: %v", seqs)
	for s := uint64(1); s < seq; s++ {
		_, read := slices.BinarySearch(seqs, s)
		require.True(t, read != failed[s], "event %d: read %v, reported failed %v", s, read, failed[s])
		if s >= resumed {
			require.True(t, read, "event %d, recorded once there was room again, is not in the log", s)
		}
	}
	require.NotEmpty(t, rep.Problems, "the gap is not reported")
	t.Logf("%d events, %d refused, %d segments; problems: %v", seq-1, len(failed), len(segs), fmt.Sprint(rep.Problems))
}
