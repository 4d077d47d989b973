package replay

import (
	"fmt"
	"strings"

	"ome.io/quota-manager/state"
)

// Step is one link of an explanation, from the node's state back to the
// input that caused it.
type Step struct {
	Seq  uint64 `json:"seq,omitempty"`
	Node string `json:"node,omitempty"`
	What string `json:"what"`
}

// maxInputs bounds how many capacity inputs one step lists.
const maxInputs = 10

// Why explains the state the node is in at the end of the replay: the
// transition that put it there and the event behind it; for a frozen node,
// the ancestor that froze it, explained in turn; for CapacityExceeded, the
// high-water mark that fell and the Node inputs that lowered it. Then the
// node's Kueue objects changed behind the manager's back, which the leader
// wrote back: why it wrote objects it had written before.
func (r *Result) Why(node string) ([]Step, error) {
	steps, err := r.why(node, map[string]bool{})
	if err != nil {
		return steps, err
	}
	steps = append(steps, r.shareSteps(node)...)
	return append(steps, r.driftSteps(node)...), nil
}

// shareSteps explain, on a management plane, how each of a team's budgets
// is split among the member clusters: the policy, each member's share and,
// for a Proportional split, each member's high-water mark of the pair and
// the report that brought it (a member that does not answer keeps the mark
// it reported last).
func (r *Result) shareSteps(node string) []Step {
	var steps []Step
	for _, sp := range r.State.Splits(node) {
		var parts []string
		for _, sh := range sp.Shares {
			parts = append(parts, sh.Cluster+"="+sh.Amount.String())
		}
		steps = append(steps, Step{Node: node, What: fmt.Sprintf("%s's budget %s is split %s among the member clusters: %s",
			node, sp.Pair, sp.Policy, orNone(strings.Join(parts, ", ")))})
		if e := r.lastMembership(); e != nil {
			var members []string
			for _, mv := range r.State.Members() {
				members = append(members, mv.Name)
			}
			steps = append(steps, Step{Seq: e.Seq, What: fmt.Sprintf("<- the fleet is %s since #%d: %s",
				orNone(strings.Join(members, ", ")), e.Seq, strings.TrimPrefix(e.Event, fmt.Sprintf("#%d ", e.Seq)))})
		}
		if sp.Policy != "Proportional" {
			steps = append(steps, Step{What: "<- as written in the budget's perCluster"})
			continue
		}
		for _, mv := range r.State.Members() {
			mark := state.Amount(0)
			for _, c := range mv.Capacity {
				if c.Pair == sp.Pair {
					mark = c.HighWaterMark
				}
			}
			what := fmt.Sprintf("<- %s's high-water mark of %s is %s", mv.Name, sp.Pair, mark)
			if e := r.lastReport(mv.Name, true); e != nil {
				what += ", " + strings.TrimPrefix(e.Event, fmt.Sprintf("#%d ", e.Seq)) + fmt.Sprintf(" at #%d", e.Seq)
			}
			if !mv.Reachable {
				what += fmt.Sprintf("; it does not answer (%s), so it keeps that mark and its share", mv.Message)
			}
			steps = append(steps, Step{Seq: 0, What: what})
		}
	}
	return steps
}

// lastMembership is the last cluster that joined or left the fleet in
// the log (a change of what the inventory says of a member is not one),
// nil when none did.
func (r *Result) lastMembership() *MembershipEntry {
	in := map[string]bool{}
	var last *MembershipEntry
	for i := range r.Memberships {
		e := &r.Memberships[i]
		if in[e.Cluster] != e.Member {
			in[e.Cluster] = e.Member
			last = e
		}
	}
	return last
}

// lastReport is the last Member event of cluster, the last one that
// found it answering when reachable is true.
func (r *Result) lastReport(cluster string, reachable bool) *MemberEntry {
	for i := len(r.Members) - 1; i >= 0; i-- {
		if e := &r.Members[i]; e.Cluster == cluster && (!reachable || e.Reachable) {
			return e
		}
	}
	return nil
}

// driftSteps are the last drifts of node's objects (maxInputs at most),
// each with the repair it asked for.
func (r *Result) driftSteps(node string) []Step {
	var ds []DriftEntry
	for _, d := range r.Drifts {
		if d.Node == node {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return nil
	}
	steps := []Step{{Node: node, What: fmt.Sprintf("%s's Kueue objects were changed behind the manager's back %d times in the log; each change made the leader compare them with the desired ones again:", node, len(ds))}}
	if len(ds) > maxInputs {
		steps = append(steps, Step{What: fmt.Sprintf("<- %d earlier changes", len(ds)-maxInputs)})
		ds = ds[len(ds)-maxInputs:]
	}
	for _, d := range ds {
		what := "<- " + d.Event
		switch p := r.phaseAt(node, d.Seq); p {
		case state.PhaseReady:
			what += ": the leader wrote back what differed"
		case "", state.PhaseDeleted:
			what += ": no node has this name, so the leader swept the objects it had labelled"
		default:
			what += fmt.Sprintf(": the node was %s, so its objects were held as they were", p)
		}
		steps = append(steps, Step{Seq: d.Seq, What: what})
	}
	return steps
}

// phaseAt is node's phase after event seq, "" before its first transition.
func (r *Result) phaseAt(node string, seq uint64) state.Phase {
	var p state.Phase
	for _, e := range r.Timeline {
		if e.Seq > seq {
			break
		}
		if e.Node == node {
			p = e.To
		}
	}
	return p
}

func (r *Result) why(node string, seen map[string]bool) ([]Step, error) {
	if seen[node] {
		return nil, nil
	}
	seen[node] = true
	last := -1
	for i := len(r.Timeline) - 1; i >= 0; i-- {
		if r.Timeline[i].Node == node {
			last = i
			break
		}
	}
	if last < 0 {
		return nil, fmt.Errorf("node %s has no transition in the log up to event %d: check the name with --state", node, r.Last)
	}
	e := r.Timeline[last]
	what := fmt.Sprintf("%s is %s since #%d", node, e.To, e.Seq)
	if e.Message != "" && e.To != state.PhaseReady {
		what += ": " + e.Message
	}
	steps := []Step{{Seq: e.Seq, Node: node, What: what}, {Seq: e.Seq, What: "<- " + e.Cause}}
	nv, exists := r.State.Node(node)
	if !exists {
		return steps, nil
	}
	switch e.To {
	case state.PhaseFrozen:
		if nv.FrozenBy != "" {
			more, err := r.why(nv.FrozenBy, seen)
			if err != nil {
				return steps, err
			}
			steps = append(steps, more...)
		}
	case state.PhaseCapacityExceeded:
		for _, v := range nv.Violations {
			if v.Reason == state.ReasonCapacityExceeded {
				steps = append(steps, r.markSteps(v.Subject, e.Seq)...)
			}
		}
	}
	return steps, nil
}

// markSteps explains the mark of pair as of seq: the last move of the mark
// at or before seq, and the changes of installed capacity that led to it
// since the move before.
func (r *Result) markSteps(pair string, seq uint64) []Step {
	moves := []int{}
	for i, c := range r.Capacity {
		if c.Pair == pair && c.Seq <= seq && c.amounts[1][0] != c.amounts[1][1] {
			moves = append(moves, i)
		}
	}
	if len(moves) == 0 {
		return []Step{{What: fmt.Sprintf("<- the high-water mark of %s never moved in the log: the budget is above it", pair)}}
	}
	m := r.Capacity[moves[len(moves)-1]]
	var out []Step
	dir := "rose"
	if m.amounts[1][1] < m.amounts[1][0] {
		dir = "fell"
	}
	if m.Seq < seq {
		out = append(out, Step{What: fmt.Sprintf("<- the budget is above the high-water mark of %s, which %s to %s at #%d", pair, dir, m.HighWaterMark[1], m.Seq)})
	} else {
		out = append(out, Step{Seq: m.Seq, What: fmt.Sprintf("<- the high-water mark of %s %s from %s to %s at #%d", pair, dir, m.HighWaterMark[0], m.HighWaterMark[1], m.Seq)})
	}
	var since uint64
	if len(moves) > 1 {
		since = r.Capacity[moves[len(moves)-2]].Seq
	}
	var inputs []Step
	for _, c := range r.Capacity {
		if c.Pair != pair || c.Seq <= since || c.Seq > m.Seq || c.amounts[0][0] == c.amounts[0][1] {
			continue
		}
		inputs = append(inputs, Step{Seq: c.Seq, What: fmt.Sprintf("<- installed %s went from %s to %s: %s", pair, c.Installed[0], c.Installed[1], c.Cause)})
	}
	if len(inputs) > maxInputs {
		n := len(inputs) - maxInputs
		inputs = append(inputs[len(inputs)-maxInputs:], Step{What: fmt.Sprintf("<- and %d earlier changes of installed %s", n, pair)})
	}
	return append(out, inputs...)
}
