package failures

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestEventLogOnAFullDisk runs a manager whose event log is on a 512 KiB
// tmpfs, fills the filesystem while Nodes keep changing, then frees it:
// the manager keeps running and reports every event it could not record,
// recording resumes, no empty segment is left, and reading the log back
// finds every event once at most, the gap reported.
func TestEventLogOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	ctx := context.Background()
	disk := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", disk, "tmpfs", 0, "size=512k"))
	t.Cleanup(func() { _ = unix.Unmount(disk, unix.MNT_DETACH) })
	dir := filepath.Join(disk, "events")
	m := testutil.StartManager(t, cluster, cluster.ManagerBin, "full-disk", "--webhook=false", "--leader-elect=false", "--event-log="+dir, "--event-log-sync=always")
	nodes := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.GPUNode(fmt.Sprintf("%s-%d", prefix, i), 8))
			require.NoError(t, err)
		}
		t.Cleanup(func() {
			for i := range n {
				_ = cluster.Kube.CoreV1().Nodes().Delete(ctx, fmt.Sprintf("%s-%d", prefix, i), metav1.DeleteOptions{})
			}
		})
	}
	errorsNow := func() float64 {
		v, err := m.Metric(ctx, "ome_quota_event_log_errors_total")
		require.NoError(t, err)
		return v
	}
	nodes("before", 10)

	filler, err := os.Create(filepath.Join(disk, "filler"))
	require.NoError(t, err)
	for buf := make([]byte, 4096); ; {
		if _, err := filler.Write(buf); err != nil {
			break
		}
	}
	require.NoError(t, filler.Close())
	nodes("full", 40)
	testutil.Eventually(t, 30*time.Second, func() string {
		if errorsNow() == 0 {
			return "no event reported unrecorded on a full disk"
		}
		return ""
	})
	// The log line follows the count.
	testutil.Eventually(t, 10*time.Second, func() string {
		log, err := os.ReadFile(m.Log)
		if err != nil || !strings.Contains(string(log), "cannot record the event; the recorded log will have a gap here") {
			return fmt.Sprintf("the manager's log does not say it could not record an event (%v)", err)
		}
		return ""
	})

	require.NoError(t, os.Remove(filepath.Join(disk, "filler")))
	failed := errorsNow()
	nodeEvents := func() float64 {
		v, err := m.Metric(ctx, "ome_quota_events_total", `kind="Node"`)
		require.NoError(t, err)
		return v
	}
	// A failed start of a segment is tried again after a backoff (up to
	// 30 s): probe with one Node at a time, half a second apart, until two
	// probes in a row are applied with no event left unrecorded.
	for i, clean := 0, 0; clean < 2; i++ {
		require.Less(t, i, 120, "recording never resumed once there was room")
		errs, seen := errorsNow(), nodeEvents()
		nodes(fmt.Sprintf("probe%d", i), 1)
		testutil.Eventually(t, 30*time.Second, func() string {
			if nodeEvents() <= seen {
				return "the probe Node's event is not applied"
			}
			return ""
		})
		if errorsNow() == errs {
			clean++
		} else {
			clean = 0
			time.Sleep(500 * time.Millisecond)
		}
	}
	seenBefore := nodeEvents()
	nodes("after", 10)
	// The manager has applied them (it hands each event to the log first,
	// and its stop closes the log after the last one).
	testutil.Eventually(t, 30*time.Second, func() string {
		if n := nodeEvents(); n < seenBefore+10 {
			return fmt.Sprintf("%v of the 10 new Nodes' events applied", n-seenBefore)
		}
		return ""
	})
	m.Stop()
	require.Equal(t, 0, m.ExitCode(), "the manager did not stop cleanly")

	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		info, err := e.Info()
		require.NoError(t, err)
		if strings.HasSuffix(e.Name(), ".seg") {
			require.Greater(t, info.Size(), int64(64), "segment %s holds no record", e.Name())
		}
	}
	seen := map[uint64]bool{}
	after := map[string]bool{}
	rep, err := store.Read(dir, 0, func(ev events.Event) error {
		if seen[ev.Seq] {
			return fmt.Errorf("event %d read twice", ev.Seq)
		}
		seen[ev.Seq] = true
		if ev.Kind == events.KindNode && strings.HasPrefix(ev.Key, "after-") {
			after[ev.Key] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, rep.Problems, "the gap is not reported")
	require.Len(t, after, 10, "recording did not resume once there was room: %v", after)
	t.Logf("%d events read, %v unrecorded; problems: %v", rep.Events, failed, rep.Problems)
}
