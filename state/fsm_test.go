package state

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/events"
)

// TestMachine tries every (cause, phase, phase) on the machine: it moves
// exactly where this table, written from the rule book and not from the
// machine's own table, says it may, and refuses everything else.
func TestMachine(t *testing.T) {
	all := append(slices.Clone(livePhases), PhaseDeleted)
	// Where a node may go from each phase, by cause; a phase not listed
	// under a cause goes nowhere on it.
	settled := livePhases[1:]
	anyLive := append(slices.Clone(settled), PhaseDeleted)
	low := []Phase{PhaseReady, PhaseFrozen, PhaseFlavorMissing, PhaseContainmentViolated, PhaseCapacityExceeded}
	mark := []Phase{PhaseReady, PhaseFrozen, PhaseCapacityExceeded}
	fleet := []Phase{PhaseReady, PhaseFrozen, PhaseFlavorMissing, PhaseSplitInvalid, PhaseContainmentViolated, PhaseCapacityExceeded}
	spec := map[Cause]map[Phase][]Phase{
		CauseMember:   {},
		CauseTree:     {},
		CauseConfig:   {},
		CauseFlavor:   {},
		CauseCapacity: {},
		CauseNone:     {},
	}
	for _, p := range livePhases { // a tree event may create, move, delete
		spec[CauseTree][p] = anyLive
	}
	for _, p := range settled { // a configuration may change every rule
		spec[CauseConfig][p] = settled
	}
	for _, p := range low { // flavors: FlavorMissing and what it hides
		spec[CauseFlavor][p] = low
	}
	for _, p := range mark { // capacity: only the last rule
		spec[CauseCapacity][p] = mark
	}
	for _, p := range fleet { // a member's flavors and marks: what they hide too
		spec[CauseMember][p] = fleet
	}

	var got []string
	m := newMachine(func(node string, from, to Phase, reason Reason, message string) {
		got = append(got, node+": "+string(from)+">"+string(to)+" "+string(reason)+" "+message)
	})
	legal := 0
	for c, froms := range spec {
		for _, from := range all {
			for _, to := range all {
				if from == to {
					continue
				}
				want := slices.Contains(froms[from], to)
				got = nil
				err := tryMove(m, c, "n", from, to, Reason(to), "why")
				switch {
				case want && err != nil:
					t.Errorf("%s: %s -> %s refused: %v", c, from, to, err)
				case want && (m.Current() != string(to) || len(got) != 1 || got[0] != "n: "+string(from)+">"+string(to)+" "+string(to)+" why"):
					t.Errorf("%s: %s -> %s: at %s, recorded %v", c, from, to, m.Current(), got)
				case !want && err == nil:
					t.Errorf("%s: %s -> %s is illegal but the machine made it", c, from, to)
				case !want && len(got) != 0:
					t.Errorf("%s: %s -> %s refused but recorded %v", c, from, to, got)
				}
				if want {
					legal++
				}
			}
		}
	}
	// Tree: Pending to 12 settled phases and Deleted, 12 settled to 11
	// others and Deleted; configuration: 12 to 11; flavors 5 to 4;
	// capacity 3 to 2; a member 6 to 5.
	if want := 13 + 12*12 + 12*11 + 5*4 + 3*2 + 6*5; legal != want {
		t.Errorf("the table allows %d moves, want %d", legal, want)
	}

	// Staying put records nothing; an illegal move panics, naming it.
	got = nil
	move(m, CauseCapacity, "a", PhaseFrozen, PhaseFrozen, ReasonFrozen, "again")
	if len(got) != 0 {
		t.Errorf("a self-transition was recorded: %v", got)
	}
	defer func() {
		if diff := cmp.Diff("state machine refused a on a capacity event: ContainmentViolated -> Ready: event capacity:toReady inappropriate in current state ContainmentViolated", recover()); diff != "" {
			t.Errorf("panic (-want +got):\n%s", diff)
		}
	}()
	move(m, CauseCapacity, "a", PhaseContainmentViolated, PhaseReady, ReasonAdmitted, MessageAdmitted)
}

// TestCauses pins the cause of every kind of event.
func TestCauses(t *testing.T) {
	want := map[events.Kind]Cause{
		events.KindAcceleratorQuota: CauseTree, events.KindConfig: CauseConfig, events.KindResourceFlavor: CauseFlavor,
		events.KindNode: CauseCapacity, events.KindDeviceClass: CauseCapacity, events.KindResourceSlice: CauseCapacity,
		events.KindTick: CauseCapacity, events.KindSynced: CauseCapacity,
		events.KindClusterQueue: CauseNone, events.KindMeasureFailed: CauseNone, events.KindMeasureRecovered: CauseNone,
		events.KindMember: CauseMember, events.KindDrift: CauseNone,
		events.KindOutcome: CauseNone, events.KindLeadership: CauseNone, events.KindStart: CauseNone, events.KindVerdict: CauseNone,
	}
	for k, c := range want {
		if got := causeOf(k); got != c {
			t.Errorf("causeOf(%s) = %s, want %s", k, got, c)
		}
	}
}
