package state

import (
	"strings"
	"testing"
	"time"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// A verdict is in the stream for the log only: applying it changes nothing
// but the last sequence number, not even the state's clock.
func TestVerdictChangesNothing(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	s := New()
	for i, ev := range []events.Event{
		events.ConfigChanged(t0, events.DefaultConfig()),
		events.QuotaUpserted(t0, &events.Quota{Name: "root", Generation: 1, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}}),
		events.Synced(t0),
	} {
		ev.Seq = uint64(i + 1)
		s.Apply(ev)
	}
	before := s.Dump()
	ev := events.Verdicted(t0.Add(time.Hour), "team-a", &events.Verdict{UID: "u", User: "alice", Operation: "CREATE",
		New: &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "root"}}, Allowed: true})
	ev.Seq = 4
	if ts := s.Apply(ev); len(ts) != 0 {
		t.Errorf("a verdict made transitions: %v", ts)
	}
	if s.LastSeq() != 4 {
		t.Errorf("LastSeq %d, want 4: the verdict was not applied", s.LastSeq())
	}
	// The dump's first line is the last sequence number.
	cut := func(d string) string { return d[strings.Index(d, "\n"):] }
	if after := s.Dump(); cut(after) != cut(before) {
		t.Errorf("a verdict changed the state:\n%s\nvs\n%s", before, after)
	}
}
