package state

import (
	"strings"
	"testing"

	"ome.io/quota-manager/events"
)

// The state keeps the applier's last report per node; a node deleted, a
// change of leadership and a new process each drop the reports, and an
// outcome asks the shell for no further comparison.
func TestOutcomes(t *testing.T) {
	s := guideState(t)
	s.TakeChanges()
	conflict := events.Outcome{Kind: events.OutcomeConflict, Message: "ClusterQueue team-alpha exists without the label"}
	applyAll(s,
		events.LeadershipChanged(t0, "m1", events.LeadershipAcquired),
		events.OutcomeReported(t0, "team-alpha", conflict),
		events.OutcomeReported(t0, "team-beta", events.Outcome{Kind: events.OutcomeApplied}),
		events.OutcomeReported(t0, "nobody", events.Outcome{Kind: events.OutcomeApplied}),
	)
	if got := s.Leader(); got != "m1" {
		t.Errorf("leader %q, want m1", got)
	}
	if got := s.Outcome("team-alpha"); got != conflict {
		t.Errorf("team-alpha's outcome %+v, want %+v", got, conflict)
	}
	if got := s.Outcome("nobody"); got != (events.Outcome{}) {
		t.Errorf("an outcome of a node the state does not hold was kept: %+v", got)
	}
	if c := s.TakeChanges(); !c.Empty() {
		t.Errorf("outcomes and leadership changed projections %+v: the pass that reports writes the status itself", c)
	}
	dump := s.Dump()
	for _, want := range []string{"leader m1\n", "  outcome ObjectConflict: ClusterQueue team-alpha exists without the label\n", "  outcome Applied\n"} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump does not say %q:\n%s", want, dump)
		}
	}
	if a, b := dump, s.Clone().Dump(); a != b {
		t.Errorf("a clone differs:\n%s\nvs\n%s", a, b)
	}

	// None clears one; a delete drops it, and a node created again under
	// the name starts without.
	applyAll(s, events.OutcomeReported(t0, "team-alpha", events.Outcome{}))
	if got := s.Outcome("team-alpha"); got != (events.Outcome{}) {
		t.Errorf("team-alpha's outcome %+v after none", got)
	}
	tree := guideTree()
	applyAll(s, events.Deleted(t0, events.KindAcceleratorQuota, "team-beta"), quota("team-beta", tree["team-beta"]))
	if got := s.Outcome("team-beta"); got != (events.Outcome{}) {
		t.Errorf("team-beta deleted and created again kept its outcome %+v", got)
	}

	// Losing the lead, or another replica's loss, and a start.
	applyAll(s, events.OutcomeReported(t0, "team-beta", events.Outcome{Kind: events.OutcomeApplied}),
		events.LeadershipChanged(t0, "m2", events.LeadershipLost))
	if s.Leader() != "m1" || s.Outcome("team-beta").Kind != events.OutcomeNone {
		t.Errorf("after m2's loss: leader %q (want m1), team-beta %+v (want none: leadership moved)", s.Leader(), s.Outcome("team-beta"))
	}
	applyAll(s, events.OutcomeReported(t0, "team-beta", events.Outcome{Kind: events.OutcomeApplied}),
		events.LeadershipChanged(t0, "m1", events.LeadershipLost))
	if s.Leader() != "" || s.Outcome("team-beta").Kind != events.OutcomeNone {
		t.Errorf("after m1's loss: leader %q, team-beta %+v; want none of either", s.Leader(), s.Outcome("team-beta"))
	}
	applyAll(s, events.LeadershipChanged(t0, "m1", events.LeadershipAcquired),
		events.OutcomeReported(t0, "team-beta", events.Outcome{Kind: events.OutcomeApplied}),
		events.Started(t0, &events.Start{Version: "v", Identity: "m1"}))
	if s.Leader() != "" || s.Outcome("team-beta").Kind != events.OutcomeNone {
		t.Errorf("after a start: leader %q, team-beta %+v; a new process knows neither", s.Leader(), s.Outcome("team-beta"))
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}
