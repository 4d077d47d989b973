package state

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/looplab/fsm"

	"ome.io/quota-manager/events"
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
	PhaseSplitInvalid        Phase = Phase(ReasonSplitInvalid)
	PhaseContainmentViolated Phase = Phase(ReasonContainmentViolated)
	PhaseCapacityExceeded    Phase = Phase(ReasonCapacityExceeded)
	PhaseDeleted             Phase = "Deleted"
)

// livePhases are the phases a node can be in while it exists.
var livePhases = []Phase{
	PhasePending, PhaseReady, PhaseFrozen, PhaseParentMissing, PhaseParentCycle, PhaseUnreachable,
	PhaseNodeKindInvalid, PhaseDepthExceeded, PhaseBudgetInvalid, PhaseFlavorMissing, PhaseSplitInvalid, PhaseContainmentViolated, PhaseCapacityExceeded,
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

// Cause groups the kinds of event by what the rule book reads of them, and
// so by the moves they may cause. The rules read the tree (parents, roles,
// budgets), the configuration (depth, measured resources), the flavors
// (FlavorMissing) and the high-water marks (CapacityExceeded), and a
// node's phase is its first violation in the rule book's order, else
// Frozen under a violating ancestor, else Ready.
type Cause string

// Causes.
const (
	// CauseTree is an AcceleratorQuota event: it may create a node
	// (Pending to any phase), delete one, and move any other anywhere.
	CauseTree Cause = "tree"
	// CauseConfig is a new configuration: every rule may read it
	// differently, but it creates and deletes nothing.
	CauseConfig Cause = "config"
	// CauseFlavor is a ResourceFlavor event: only FlavorMissing appears or
	// clears, which can also bring to the surface, or hide, the rules after
	// it (ContainmentViolated, CapacityExceeded), and freeze or thaw the
	// nodes below.
	CauseFlavor Cause = "flavor"
	// CauseCapacity is an event that measures (a Node, a DRA object, a
	// tick, the Synced marker): only CapacityExceeded, the rule book's
	// last rule, appears or clears, so a node moves only between Ready,
	// Frozen and CapacityExceeded.
	CauseCapacity Cause = "capacity"
	// CauseMember is what a management plane read of a member cluster,
	// or a cluster joining or leaving its fleet: its flavors (FlavorMissing, with what it hides, as for CauseFlavor)
	// and its marks (SplitInvalid of a Proportional split, and
	// CapacityExceeded, on the fleet's sums).
	CauseMember Cause = "member"
	// CauseNone is every other event (usage, outcomes, leadership,
	// markers, verdicts): no node moves.
	CauseNone Cause = "none"
)

// causeOf is the cause of an event of kind k.
func causeOf(k events.Kind) Cause {
	switch k {
	case events.KindAcceleratorQuota:
		return CauseTree
	case events.KindConfig:
		return CauseConfig
	case events.KindResourceFlavor:
		return CauseFlavor
	case events.KindNode, events.KindDeviceClass, events.KindResourceSlice, events.KindTick, events.KindSynced:
		return CauseCapacity
	case events.KindMember, events.KindMembership:
		return CauseMember
	}
	return CauseNone
}

var (
	settledPhases  = livePhases[1:]
	flavorPhases   = []Phase{PhaseReady, PhaseFrozen, PhaseFlavorMissing, PhaseContainmentViolated, PhaseCapacityExceeded}
	capacityPhases = []Phase{PhaseReady, PhaseFrozen, PhaseCapacityExceeded}
	memberPhases   = []Phase{PhaseReady, PhaseFrozen, PhaseFlavorMissing, PhaseSplitInvalid, PhaseContainmentViolated, PhaseCapacityExceeded}
)

// legalMoves is the machine's table: for each cause, the phases a node
// may leave and those it may enter. Deleted is terminal and Pending is
// never entered.
var legalMoves = map[Cause]struct{ from, to []Phase }{
	CauseTree:     {livePhases, append(slices.Clone(settledPhases), PhaseDeleted)},
	CauseConfig:   {settledPhases, settledPhases},
	CauseFlavor:   {flavorPhases, flavorPhases},
	CauseCapacity: {capacityPhases, capacityPhases},
	CauseMember:   {memberPhases, memberPhases},
}

// eventName names the machine's event that enters phase to for cause c:
// "tree:toReady", "capacity:toCapacityExceeded", ...
func eventName(c Cause, to Phase) string { return string(c) + ":to" + string(to) }

var machineEvents = func() fsm.Events {
	var evs fsm.Events
	for _, c := range slices.Sorted(maps.Keys(legalMoves)) {
		mv := legalMoves[c]
		for _, dst := range mv.to {
			var src []string
			for _, p := range mv.from {
				if p != dst {
					src = append(src, string(p))
				}
			}
			evs = append(evs, fsm.EventDesc{Name: eventName(c, dst), Src: src, Dst: string(dst)})
		}
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

// move takes node from phase from to phase to on machine m, for an event
// of cause c. Staying in the same phase is a no-op; a move the table does
// not allow is a bug in the reducer or in the table, and panics.
func move(m *fsm.FSM, c Cause, node string, from, to Phase, reason Reason, message string) {
	if from == to {
		return
	}
	if err := tryMove(m, c, node, from, to, reason, message); err != nil {
		panic(fmt.Sprintf("state machine refused %s on a %s event: %s -> %s: %v", node, c, from, to, err))
	}
}

// tryMove is move that returns the machine's refusal.
func tryMove(m *fsm.FSM, c Cause, node string, from, to Phase, reason Reason, message string) error {
	m.SetState(string(from))
	return m.Event(context.Background(), eventName(c, to), node, reason, message)
}
