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

// TestVerdictsKeepToTheirShare: forged verdicts, denied and admitted (a
// caller that reaches the webhook's port can have it give any number),
// flood the log of unauthenticated verdicts and stay within its sixteenth
// of --event-log-max-bytes, newest kept; the main log's events, which decide
// state, are all still there, and no verdict enters the event stream.
func TestVerdictsKeepToTheirShare(t *testing.T) {
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
	m.verdicts, err = openVerdicts(o, func(ev events.Event, err error) { t.Errorf("recording %v: %v", ev, err) })
	require.NoError(t, err)

	spec := aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "8").Obj().Spec
	ctx := context.Background()
	const flood = 5000 // about 2 MiB encoded, 32 times the share
	for i := range flood {
		m.OnVerdict(ctx, "team-a", &events.Verdict{UID: fmt.Sprintf("forged-%d", i), User: "mallory", Operation: "UPDATE",
			Allowed: i%2 == 0, Code: 403 * int32(i%2), Message: strings.Repeat("x", 200), Old: &spec, New: &spec})
	}
	require.NoError(t, m.verdicts.close())
	m.OnVerdict(ctx, "team-a", &events.Verdict{UID: "late", User: "alice", Operation: "UPDATE", Allowed: true}) // after the close: not kept

	dir := filepath.Join(o.EventLog, store.VerdictsDir)
	// The store removes whole segments when it starts one, so a log is at
	// most its bound plus the segment being written (a quarter of it).
	require.LessOrEqual(t, folderBytes(t, dir), int64(1<<16+1<<14), "the verdicts outgrew their share")
	var first, last uint64
	var n int
	_, err = store.Read(dir, 0, func(ev events.Event) error {
		require.Equal(t, events.KindVerdict, ev.Kind)
		require.Equal(t, "replica-a", ev.Verdict.Replica)
		require.Equal(t, fmt.Sprintf("forged-%d", ev.Seq-1), ev.Verdict.UID, "verdicts out of order")
		if first == 0 {
			first = ev.Seq
		}
		last = ev.Seq
		n++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, uint64(flood), last, "the newest verdict is not kept")
	require.Greater(t, first, uint64(1), "nothing was removed: the flood did not fill the share")
	t.Logf("verdicts kept: %d of %d (events %d to %d), %d bytes", n, flood, first, last, folderBytes(t, dir))

	rep, err := store.Read(o.EventLog, 0, func(events.Event) error { return nil })
	require.NoError(t, err)
	require.Equal(t, kept, rep.Events, "the main log lost events")
	require.Equal(t, uint64(1), rep.First)
	require.Empty(t, rep.Problems)
	require.Zero(t, m.stream.Len(), "verdicts entered the event stream")

	// Without an event log, verdicts are not kept, and still stay out of
	// the stream.
	bare := &Manager{metrics: metrics.New(), opts: DefaultOptions(), stream: events.NewStream(16, 1)}
	bare.OnVerdict(ctx, "team-a", &events.Verdict{UID: "u", Allowed: true})
	require.Zero(t, bare.stream.Len())
}

// TestAuthenticatedVerdictsOutlastAFlood: verdicts on authenticated
// reviews, interleaved with a flood of unauthenticated ones many times
// their log's share, are all kept, in order, in a log of their own; the
// flood turns over only its own log.
func TestAuthenticatedVerdictsOutlastAFlood(t *testing.T) {
	o := DefaultOptions()
	o.EventLog = t.TempDir()
	o.EventLogMaxBytes = 1 << 20
	o.EventLogSync = string(store.SyncNever)
	o.Identity = "replica-a"
	m := &Manager{metrics: metrics.New(), opts: o, stream: events.NewStream(16, 1)}
	var err error
	m.verdicts, err = openVerdicts(o, func(ev events.Event, err error) { t.Errorf("recording %v: %v", ev, err) })
	require.NoError(t, err)

	spec := aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "8").Obj().Spec
	ctx := context.Background()
	const flood, genuine = 5000, 50 // the flood: about 2 MiB encoded, 32 times its share
	for i := range flood {
		if i%(flood/genuine) == 0 {
			m.OnVerdict(ctx, "team-a", &events.Verdict{UID: fmt.Sprintf("genuine-%d", i/(flood/genuine)), User: "alice", Operation: "UPDATE",
				Allowed: true, Old: &spec, New: &spec, Authenticated: true, Record: "r"})
		}
		m.OnVerdict(ctx, "team-a", &events.Verdict{UID: fmt.Sprintf("forged-%d", i), User: "alice", Operation: "UPDATE",
			Allowed: true, Message: strings.Repeat("x", 200), Old: &spec, New: &spec, Record: "r"})
	}
	require.NoError(t, m.verdicts.close())

	var uids []string
	rep, err := store.Read(filepath.Join(o.EventLog, store.AuthenticatedVerdictsDir), 0, func(ev events.Event) error {
		require.True(t, ev.Verdict.Authenticated, "an unauthenticated verdict in the authenticated log: %s", ev.Verdict.UID)
		uids = append(uids, ev.Verdict.UID)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	want := make([]string, genuine)
	for i := range want {
		want[i] = fmt.Sprintf("genuine-%d", i)
	}
	require.Equal(t, want, uids, "authenticated verdicts were lost")

	rep, err = store.Read(filepath.Join(o.EventLog, store.VerdictsDir), 0, func(ev events.Event) error {
		require.False(t, ev.Verdict.Authenticated, "an authenticated verdict in the unauthenticated log: %s", ev.Verdict.UID)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, rep.First, uint64(1), "nothing was removed: the flood did not fill its share")
	require.Equal(t, uint64(flood), rep.Last, "the newest unauthenticated verdict is not kept")
}
