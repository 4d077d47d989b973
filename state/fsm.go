package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/looplab/fsm"
)

// Phase is the state of one node's state machine.
type Phase string

// Phases. Every rule has its own phase, named like its reason. Pending is a
// new node's phase until the event that created it is applied; Deleted is
// the terminal phase of a node whose AcceleratorQuota is gone.
const (
	PhasePending             Phase = "Pending"
	PhaseReady               Phase = "Ready"
	PhaseFrozen              Phase = "Frozen"
	PhaseParentMissing       Phase = Phase(ReasonParentMissing)
	PhaseParentCycle         Phase = Phase(ReasonParentCycle)
	PhaseUnreachable         Phase = Phase(ReasonUnreachable)
	PhaseNodeKindInvalid     Phase = Phase(ReasonNodeKindInvalid)
	PhaseDepthExceeded       Phase = Phase(ReasonDepthExceeded)
	PhaseBudgetInvalid       Phase = Phase(ReasonBudgetInvalid)
	PhaseFlavorMissing       Phase = Phase(ReasonFlavorMissing)
	PhaseContainmentViolated Phase = Phase(ReasonContainmentViolated)
	PhaseCapacityExceeded    Phase = Phase(ReasonCapacityExceeded)
	PhaseDeleted             Phase = "Deleted"
)

// livePhases are the phases a node can be in while it exists.
var livePhases = []Phase{
	PhasePending, PhaseReady, PhaseFrozen, PhaseParentMissing, PhaseParentCycle, PhaseUnreachable,
	PhaseNodeKindInvalid, PhaseDepthExceeded, PhaseBudgetInvalid, PhaseFlavorMissing, PhaseContainmentViolated, PhaseCapacityExceeded,
}

// Transition is a node's move from one phase to another, with the reason
// and message of the phase it enters.
type Transition struct {
	Seq     uint64
	Node    string
	From    Phase
	To      Phase
	Reason  Reason
	Message string
}

// String is "node: From -> To: message", without the message when the
// node becomes Ready (it is always MessageAdmitted) or Deleted.
func (t Transition) String() string {
	if t.To == PhaseDeleted || t.To == PhaseReady {
		return fmt.Sprintf("%s: %s -> %s", t.Node, t.From, t.To)
	}
	return fmt.Sprintf("%s: %s -> %s: %s", t.Node, t.From, t.To, t.Message)
}

// eventTo names the machine's event that enters phase p: "toReady",
// "toFrozen", "toCapacityExceeded", ... Any live phase can move to any
// other; Deleted is terminal.
func eventTo(p Phase) string { return "to" + string(p) }

var machineEvents = func() fsm.Events {
	var evs fsm.Events
	for _, dst := range append(livePhases[1:], PhaseDeleted) {
		src := make([]string, len(livePhases))
		for i, p := range livePhases {
			src[i] = string(p)
		}
		evs = append(evs, fsm.EventDesc{Name: eventTo(dst), Src: src, Dst: string(dst)})
	}
	return evs
}()

// newMachine returns the state machine every node of a state moves
// through: looplab/fsm keeps the transition table once, not once per node,
// and a node's phase is its own (member.phase), set on the machine before
// each move. Its only callback records the transition through enter: it
// does no I/O and never calls back into the machine.
func newMachine(enter func(node string, from, to Phase, reason Reason, message string)) *fsm.FSM {
	return fsm.NewFSM(string(PhasePending), machineEvents, fsm.Callbacks{
		"enter_state": func(_ context.Context, e *fsm.Event) {
			node, reason, message := e.Args[0].(string), e.Args[1].(Reason), e.Args[2].(string)
			enter(node, Phase(e.Src), Phase(e.Dst), reason, message)
		},
	})
}

// move takes node from phase from to phase to on machine m. Staying in the
// same phase is a no-op (the machine reports it as NoTransitionError); any
// other refusal is a bug in the reducer, which computes only moves that the
// table allows.
func move(m *fsm.FSM, node string, from, to Phase, reason Reason, message string) {
	if from == to {
		return
	}
	m.SetState(string(from))
	err := m.Event(context.Background(), eventTo(to), node, reason, message)
	if err != nil && !errors.As(err, &fsm.NoTransitionError{}) {
		panic(fmt.Sprintf("state machine refused %s: %s -> %s: %v", node, from, to, err))
	}
}
