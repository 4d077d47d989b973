package state

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/looplab/fsm"
)

func TestMachine(t *testing.T) {
	var got []string
	m := newMachine(func(node string, from, to Phase, reason Reason, message string) {
		got = append(got, node+": "+string(from)+">"+string(to)+" "+string(reason)+" "+message)
	})
	// Every live phase reaches every other, for any node on the one machine.
	for _, to := range livePhases[1:] {
		for _, from := range livePhases {
			if from == to {
				continue
			}
			got = nil
			move(m, "n-"+string(from), from, to, Reason(to), "why")
			if m.Current() != string(to) || len(got) != 1 || got[0] != "n-"+string(from)+": "+string(from)+">"+string(to)+" "+string(to)+" why" {
				t.Fatalf("%s -> %s: at %s, recorded %v", from, to, m.Current(), got)
			}
		}
	}
	// Staying put records nothing; the machine itself calls it a
	// NoTransitionError, which move treats as a no-op.
	got = nil
	move(m, "a", PhaseFrozen, PhaseFrozen, ReasonFrozen, "again")
	if len(got) != 0 {
		t.Errorf("a self-transition was recorded: %v", got)
	}
	m.SetState(string(PhaseFrozen))
	if err := m.Event(context.Background(), eventTo(PhaseFrozen), "a", ReasonFrozen, ""); !errors.As(err, &fsm.NoTransitionError{}) {
		t.Errorf("self-transition: %v, want NoTransitionError", err)
	}
	// Deleted is terminal.
	move(m, "a", PhaseFrozen, PhaseDeleted, "", "")
	if diff := cmp.Diff([]string{"a: Frozen>Deleted  "}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	defer func() {
		if recover() == nil {
			t.Error("a deleted node moved on")
		}
	}()
	move(m, "a", PhaseDeleted, PhaseReady, ReasonAdmitted, MessageAdmitted)
}
