package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/store"
)

// folderBytes is the size of the segments directly in dir.
func folderBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".seg") {
			info, err := e.Info()
			require.NoError(t, err)
			n += info.Size()
		}
	}
	return n
}

// TestRefusalsKeepToTheirShare: denials flood the log of refused reviews
// (a caller that reaches the webhook's port can send any number) and stay
// within its eighth of --event-log-max-bytes, newest kept; the main log's
// events, which decide state, are all still there. Admitted verdicts go
// into the stream, in order with the rest.
func TestRefusalsKeepToTheirShare(t *testing.T) {
	o := DefaultOptions()
	o.EventLog = t.TempDir()
	o.EventLogMaxBytes = 1 << 20
	o.EventLogSync = string(store.SyncNever)
	o.Identity = "replica-a"
	so, err := o.StoreOptions()
	require.NoError(t, err)
	require.Equal(t, int64(1<<20-1<<17), so.MaxBytes, "the main log's share")
	main, err := store.Open(o.EventLog, so)
	require.NoError(t, err)
	defer main.Close()
	const kept = 200
	for i := range kept {
		ev := events.Synced(time.Unix(1700000000, 0))
		ev.Seq = uint64(i + 1)
		require.NoError(t, main.Append(ev))
	}
	m := &Manager{metrics: metrics.New(), opts: o, stream: events.NewStream(16, kept+1)}
	m.refused, err = openRefused(o)
	require.NoError(t, err)

	spec := aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "8").Obj().Spec
	ctx := context.Background()
	const denials = 5000 // about 2 MiB encoded, 16 times the share
	for i := range denials {
		m.OnVerdict(ctx, "team-a", &events.Verdict{UID: fmt.Sprintf("forged-%d", i), User: "mallory", Operation: "UPDATE", Code: 403,
			Message: strings.Repeat("x", 200), Old: &spec, New: &spec})
	}
	m.OnVerdict(ctx, "team-a", &events.Verdict{UID: "real", User: "alice", Operation: "UPDATE", Allowed: true, Old: &spec, New: &spec})
	require.NoError(t, m.refused.close())

	refusedDir := filepath.Join(o.EventLog, store.RefusedDir)
	require.LessOrEqual(t, folderBytes(t, refusedDir), int64(1<<17), "the refused reviews outgrew their share")
	var first, last uint64
	var n int
	_, err = store.Read(refusedDir, 0, func(ev events.Event) error {
		require.Equal(t, events.KindVerdict, ev.Kind)
		require.False(t, ev.Verdict.Allowed, "an admitted verdict in the log of refused reviews")
		require.Equal(t, "replica-a", ev.Verdict.Replica)
		if first == 0 {
			first = ev.Seq
		}
		last = ev.Seq
		n++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, uint64(denials), last, "the newest denial is not kept")
	require.Greater(t, first, uint64(1), "nothing was removed: the flood did not fill the share")
	t.Logf("refused reviews kept: %d of %d (events %d to %d), %d bytes", n, denials, first, last, folderBytes(t, refusedDir))

	rep, err := store.Read(o.EventLog, 0, func(events.Event) error { return nil })
	require.NoError(t, err)
	require.Equal(t, kept, rep.Events, "the main log lost events")
	require.Equal(t, uint64(1), rep.First)
	require.Empty(t, rep.Problems)

	m.stream.Close()
	var streamed []events.Event
	require.NoError(t, m.stream.Consume(ctx, func(ev events.Event) error { streamed = append(streamed, ev); return nil }))
	require.Len(t, streamed, 1, "the stream holds other than the admitted verdict")
	require.Equal(t, events.KindVerdict, streamed[0].Kind)
	require.Equal(t, "real", streamed[0].Verdict.UID)
}
