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
	m := newMachine(PhasePending, func(from, to Phase, reason Reason, message string) {
		got = append(got, string(from)+">"+string(to)+" "+string(reason)+" "+message)
	})
	// Every live phase reaches every other.
	for _, to := range livePhases[1:] {
		for _, from := range livePhases {
			if from == to {
				continue
			}
			m.SetState(string(from))
			got = nil
			move(m, to, Reason(to), "why")
			if m.Current() != string(to) || len(got) != 1 {
				t.Fatalf("%s -> %s: at %s, recorded %v", from, to, m.Current(), got)
			}
		}
	}
	// Staying put records nothing; the machine itself calls it a
	// NoTransitionError, which move treats as a no-op.
	m.SetState(string(PhaseFrozen))
	got = nil
	move(m, PhaseFrozen, ReasonFrozen, "again")
	if len(got) != 0 {
		t.Errorf("a self-transition was recorded: %v", got)
	}
	if err := m.Event(context.Background(), eventTo(PhaseFrozen), ReasonFrozen, ""); !errors.As(err, &fsm.NoTransitionError{}) {
		t.Errorf("self-transition: %v, want NoTransitionError", err)
	}
	// Deleted is terminal.
	move(m, PhaseDeleted, "", "")
	if diff := cmp.Diff([]string{"Frozen>Deleted  "}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	defer func() {
		if recover() == nil {
			t.Error("a deleted node's machine moved on")
		}
	}()
	move(m, PhaseReady, ReasonAdmitted, MessageAdmitted)
}
