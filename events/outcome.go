package events

import (
	"fmt"
	"strings"
	"time"
)

// The leader's own doings travel through the stream too, so that a replay
// reproduces the AcceleratorQuotas' statuses and not only the tree: how
// its applier left each node's Kueue objects (an Outcome event), and when
// it started or stopped leading (a Leadership event). Both came with
// schema version 4.
const (
	// KindOutcome is how the leader's applier left one node's Kueue
	// objects: what the node's Materialized condition reports. Its Key is
	// the node.
	KindOutcome Kind = "Outcome"
	// KindLeadership is this replica taking or losing the lead: only the
	// leader writes, and only its applier reports outcomes.
	KindLeadership Kind = "Leadership"
)

// OutcomeKind is how the applier left a node's objects.
type OutcomeKind string

// Outcomes of a node's materialization. They are the reasons its
// Materialized condition reports.
const (
	// OutcomeNone: the applier had nothing to bring in place (the node is
	// held as it is not Ready, or no namespace is enrolled), or it has not
	// reported on the node yet. The state keeps no outcome then.
	OutcomeNone OutcomeKind = ""
	// OutcomeApplied: every Kueue object of the node matches what is
	// desired, written or found in place.
	OutcomeApplied OutcomeKind = "Applied"
	// OutcomeConflict: an object of the node's name exists without the
	// manager's label; the manager never takes it over.
	OutcomeConflict OutcomeKind = "ObjectConflict"
	// OutcomeFailed: a write failed; the message says which and why.
	OutcomeFailed OutcomeKind = "MaterializationFailed"
)

// Outcome is the applier's report on one node: the worst of its objects'
// (a conflict over a failure over applied). It holds no time, no count and
// nothing that changes from one pass to the next while the objects stay
// as they are, so that a pass that confirms them reports the same outcome
// again, which the shell then does not send.
type Outcome struct {
	Kind OutcomeKind `json:"kind,omitempty"`
	// Message explains a conflict or a failure, naming the object.
	Message string `json:"message,omitempty"`
}

// LeadershipChange says whether a replica took or lost the lead.
type LeadershipChange string

// Changes of leadership.
const (
	LeadershipAcquired LeadershipChange = "Acquired"
	LeadershipLost     LeadershipChange = "Lost"
)

// Leadership is the payload of a Leadership event.
type Leadership struct {
	// Identity is the replica's name in the Lease.
	Identity string           `json:"identity"`
	Change   LeadershipChange `json:"change"`
	// Term and Nonce name this lead, on its acquisition (schema version
	// 12): Term is the Lease's resourceVersion as the new leader read it
	// after taking it (0 without leader election), which grows with every
	// change of holder; Nonce is drawn once per process. A management
	// plane marks its hold records with them (see state's holds).
	Term  uint64 `json:"term,omitempty"`
	Nonce string `json:"nonce,omitempty"`
}

// Mark is the lead's name on what it writes: TERM/NONCE; "" for a
// Leadership event that carries neither.
func (l Leadership) Mark() string {
	if l.Nonce == "" {
		return ""
	}
	return fmt.Sprintf("%d/%s", l.Term, l.Nonce)
}

// OutcomeReported is the leader's applier reporting how it left node's
// Kueue objects.
func OutcomeReported(t time.Time, node string, o Outcome) Event {
	return Event{Time: t, Kind: KindOutcome, Key: node, Outcome: &o}
}

// LeadershipChanged is this replica, named identity, taking or losing the
// lead.
func LeadershipChanged(t time.Time, identity string, c LeadershipChange) Event {
	return Event{Time: t, Kind: KindLeadership, Leadership: &Leadership{Identity: identity, Change: c}}
}

// validateOutcome checks an Outcome event's shape; count and first are
// the event's payloads.
func (e *Event) validateOutcome(count int, first string) error {
	switch {
	case e.Op != "":
		return fmt.Errorf("outcome event #%d has an op: only object events carry one", e.Seq)
	case e.Key == "":
		return fmt.Errorf("outcome event #%d has no key: name the node", e.Seq)
	case count != 1 || first != "outcome":
		return fmt.Errorf("outcome event #%d must carry exactly one payload, %q", e.Seq, "outcome")
	}
	switch o := e.Outcome; o.Kind {
	case OutcomeNone, OutcomeApplied:
		if o.Message != "" {
			return fmt.Errorf("outcome event #%d for %q carries a message with kind %q: only %s and %s explain themselves", e.Seq, e.Key, o.Kind, OutcomeConflict, OutcomeFailed)
		}
	case OutcomeConflict, OutcomeFailed:
	default:
		return fmt.Errorf("outcome event #%d for %q has kind %q: use %q, %q, %q or none", e.Seq, e.Key, o.Kind, OutcomeApplied, OutcomeConflict, OutcomeFailed)
	}
	return nil
}

// validateLeadership checks a Leadership event's shape.
func (e *Event) validateLeadership(count int, first string) error {
	switch {
	case e.Op != "" || e.Key != "":
		return fmt.Errorf("leadership event #%d has an op or a key: only object events carry them", e.Seq)
	case count != 1 || first != "leadership":
		return fmt.Errorf("leadership event #%d must carry exactly one payload, %q", e.Seq, "leadership")
	case e.Leadership.Identity == "":
		return fmt.Errorf("leadership event #%d names no identity: give the replica's name in the Lease", e.Seq)
	}
	switch e.Leadership.Change {
	case LeadershipAcquired:
		if strings.Contains(e.Leadership.Nonce, "/") {
			return fmt.Errorf("leadership event #%d has nonce %q: a nonce holds no '/'", e.Seq, e.Leadership.Nonce)
		}
		return nil
	case LeadershipLost:
		if e.Leadership.Term != 0 || e.Leadership.Nonce != "" {
			return fmt.Errorf("leadership event #%d loses the lead and carries a term or a nonce: only taking it does", e.Seq)
		}
		return nil
	}
	return fmt.Errorf("leadership event #%d has change %q: use %q or %q", e.Seq, e.Leadership.Change, LeadershipAcquired, LeadershipLost)
}
