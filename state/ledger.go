package state

import (
	"maps"
	"strconv"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// The admission webhook keeps, in an AdmissionLedger, a Reservation for
// each tree write it admitted and has not yet seen land. These are the
// rule book's side of it: when the state shows a reserved write landed (or
// unable to land), which reservations can change a write's verdict, and
// the verdict of a write on every combination of the reserved writes that
// may still land. docs/webhook.md says why that is enough.

// Progress is a resourceVersion of AcceleratorQuotas up to which the state
// holds every version of every AcceleratorQuota: the highest applied, as
// a watch delivers them in order; while a list is delivered (in the order
// of names, after a watch ended), the version before it, until the list
// is all in (QuotaListed), and then the list's.
func (s *State) Progress() uint64 { return s.progress }

// Horizon is the highest resourceVersion of the AcceleratorQuota events
// applied: what the state shows of a node, a reserved write settled
// among it, may rest on any version up to it. It is Progress but while a
// list is delivered. A replica that removes reservations it saw settle
// raises the ledger's floor to its Horizon, so that every replica judges
// only once it holds what they rested on.
func (s *State) Horizon() uint64 { return s.horizon }

// Settled reports whether the state shows that the reserved write landed,
// or that it can no longer land. A CREATE has landed once the state holds
// the node with the reservation's uid. An UPDATE or DELETE judged on the
// version Base can land only as the version that follows it: once the
// state has seen Base and the node has moved past it, or is gone, it
// landed or never will. A standing reservation (Standing) settles only
// once the state has seen Since and the object is gone. A reservation the
// state cannot place (no uid, no base) is never settled: it expires
// instead.
func (s *State) Settled(r *v1beta1.Reservation) bool {
	m := s.members[r.Node]
	if r.Operation == "CREATE" {
		return m != nil && r.UID != "" && m.uid == r.UID
	}
	gone := m == nil || m.uid != r.UID
	if Standing(r) {
		since, err := strconv.ParseUint(r.Since, 10, 64)
		return err == nil && since > 0 && s.progress >= since && gone
	}
	base, err := strconv.ParseUint(r.Base, 10, 64)
	if err != nil || base == 0 || s.progress < base {
		return false
	}
	return gone || m.version > base
}

// Standing reports whether r is a standing reservation: an UPDATE with no
// Base, which stands for its replica's writes of the node up to r.Spec
// (Within) until it is removed or expires. (An UPDATE reserved without a
// Base by a version that did not know Since reads as one that never
// settles, which is as safe.)
func Standing(r *v1beta1.Reservation) bool { return r.Operation == "UPDATE" && r.Base == "" }

// Covered reports whether a standing reservation can change no verdict:
// the state holds its object with a spec that r.Spec is within, so every
// write it stands for makes the node no larger than it is already.
func (s *State) Covered(r *v1beta1.Reservation) bool {
	return s.CoveredBy(r, Parse(r.Node, r.Spec))
}

// CoveredBy is Covered with r's spec parsed beforehand (Parse(r.Node,
// r.Spec)), so that under the reducer's lock it only compares.
func (s *State) CoveredBy(r *v1beta1.Reservation, p Parsed) bool {
	m := s.members[r.Node]
	return Standing(r) && m != nil && m.uid == r.UID && r.Spec != nil && p.spec != nil && p.name == r.Node &&
		r.Node != v1beta1.RootName && within(m.shape, p.sh)
}

// zone is what a write reads or changes of the tree: facts are the nodes
// whose spec or children's totals it reads and changes (the node, its old
// and new parent); placed the node whose place, and its subtree's, it
// changes (a move, a delete, the create of a node that has children
// already); ancestors the nodes whose places decide the written node's
// own (the old and new parents' chains, for a create or a move).
type zone struct{ facts, placed, ancestors []string }

func (s *State) zoneOf(name string, spec *v1beta1.AcceleratorQuotaSpec) zone {
	z := zone{facts: []string{name}}
	m := s.members[name]
	// Only the parents matter here: a reservation's spec is not parsed
	// (its budgets) on every look, which each applied event repeats.
	var old, next string
	if m != nil {
		old = m.shape.parent
	}
	if spec != nil {
		next = parentOf(name, spec)
	}
	for _, p := range []string{old, next} {
		if p != "" {
			z.facts = append(z.facts, p)
		}
	}
	moved := spec != nil && (m == nil || old != next)
	if spec == nil || (m != nil && moved) || (m == nil && len(s.kids[name]) > 0) {
		z.placed = []string{name}
	}
	if moved {
		// The node's place before and after the write decides its
		// violations on both sides.
		seen := map[string]bool{}
		for _, p := range []string{old, next} {
			for cur := p; cur != "" && !seen[cur]; {
				seen[cur] = true
				z.ancestors = append(z.ancestors, cur)
				pm := s.members[cur]
				if pm == nil {
					break
				}
				cur = pm.shape.parent
			}
		}
	}
	return z
}

// Related are the reservations of pending that can change the verdict of
// writing spec to name (nil: deleting it): those whose zone meets the
// write's, and those whose zone meets theirs, and so on, in the order
// given. Two writes' zones meet where one changes what the other reads: a
// fact of both, or a node one places among the other's ancestors. Two
// writes whose zones do not meet cannot change each other's verdict: the
// rules of the nodes a write can change (State.Admit's affected nodes)
// read only their own specs and places, their parents' roles and their
// children's totals.
//
// The closure is a walk over an index of the zones by node, so it costs
// the sum of the zones' sizes, linear in pending (a zone holds the node,
// its parents, and for a move their chains), however the reservations
// chain into one another.
func (s *State) Related(name string, spec *v1beta1.AcceleratorQuotaSpec, pending []v1beta1.Reservation) []v1beta1.Reservation {
	// By node: the reservations that have it as a fact, that place it,
	// and that have it among their ancestors.
	byFact, byPlaced, byAncestor := map[string][]int{}, map[string][]int{}, map[string][]int{}
	zones := make([]zone, len(pending))
	for i := range pending {
		z := s.zoneOf(pending[i].Node, pending[i].Spec)
		zones[i] = z
		for _, n := range z.facts {
			byFact[n] = append(byFact[n], i)
		}
		for _, n := range z.placed {
			byPlaced[n] = append(byPlaced[n], i)
		}
		for _, n := range z.ancestors {
			byAncestor[n] = append(byAncestor[n], i)
		}
	}
	in := make([]bool, len(pending))
	var queue []int
	reach := func(idx []int) {
		for _, j := range idx {
			if !in[j] {
				in[j] = true
				queue = append(queue, j)
			}
		}
	}
	// What the related writes read and change so far: a reservation
	// whose zone meets it is related.
	facts, placed, ancestors := map[string]bool{}, map[string]bool{}, map[string]bool{}
	add := func(z zone) {
		for _, n := range z.facts {
			if !facts[n] {
				facts[n] = true
				reach(byFact[n])
			}
		}
		for _, n := range z.placed {
			if !placed[n] {
				placed[n] = true
				reach(byAncestor[n])
			}
		}
		for _, n := range z.ancestors {
			if !ancestors[n] {
				ancestors[n] = true
				reach(byPlaced[n])
			}
		}
	}
	add(s.zoneOf(name, spec))
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		add(zones[j])
	}
	var out []v1beta1.Reservation
	for i := range pending {
		if in[i] {
			out = append(out, pending[i])
		}
	}
	return out
}

// MaxUncertain bounds how many unsettled reservations one verdict weighs:
// it judges the write on each of their 2^n combinations.
const MaxUncertain = 3

// AdmitUncertain judges writing spec to name on tree (with marks, flavors
// and cfg) with each combination of the reserved writes that may land,
// other than none (State.Admit judges that one), and returns the first
// refusal, if any. Each combination costs an O(tree) judgement (Admit), so
// the caller passes a snapshot taken under the reducer's lock and judges
// outside it, and at most MaxUncertain reservations.
func AdmitUncertain(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config,
	name string, spec *v1beta1.AcceleratorQuotaSpec, pending []v1beta1.Reservation) (Admission, bool) {
	for mask := 1; mask < 1<<len(pending); mask++ {
		t := maps.Clone(tree)
		if t == nil {
			t = Tree{}
		}
		for i, r := range pending {
			if mask&(1<<i) == 0 {
				continue
			}
			if r.Spec == nil {
				delete(t, r.Node)
			} else {
				t[r.Node] = r.Spec
			}
		}
		if a := Admit(t, marks, flavors, cfg, name, spec); !a.Allowed {
			return a, false
		}
	}
	return Admission{Allowed: true}, true
}

// AdmitDominated judges writing spec to name on tree (with marks, flavors
// and cfg) on one combination of the reserved writes that may land, the
// one that bounds the others, when there is such a combination: it reports
// false, having judged nothing, when a reservation is not of the kind
// below, and the refusal when the write is refused there. Then it holds for
// any number of reservations, where AdmitUncertain, which tries every
// combination, is bounded by MaxUncertain.
//
// Each reservation must be on a team (not root, not the written node, and
// no other reservation on the same team) and do no more than raise the
// team's budgets, add the team or take it away. A raise keeps a team the
// tree holds in the same seat (SameSeat), with every budget of the tree's
// within the reservation's (Within: the pair kept, the nominal no
// smaller); a standing reservation's writes all are within its spec. A
// create adds a team the tree does not hold, a delete takes one it holds;
// for those, no node of the tree and not the write names the team as its
// parent. The bounding combination has every raise and create landed and
// no delete.
//
// Why a write admitted there is admitted on every combination: what the
// rules read of a team itself (its budgets, flavors, split, place and its
// parent's role) is the same before and after the write, which is of
// another node, so whichever spec the team has, its own violations add
// no refusal; and where the team is absent it has none. Across nodes, a
// team's budgets are read only by ContainmentViolated on its parent,
// through the children's total, and its presence only by its parent's
// list of children (a delete of the parent is refused while it has any),
// no other node naming it. Per Cohort and pair, the overrun before the
// write is the children's total less the budget, largest on the bounding
// combination; the write changes it by an amount d of its own (its change
// to that total and to that budget), the same on every combination. The
// write is refused on that key when the overrun after it is above 0 and
// new or larger: when d > 0 and the overrun after it is above 0, which,
// holding on a combination, holds on the bounding one. And a parent that
// has a child on some combination has it on the bounding one.
func AdmitDominated(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config,
	name string, spec *v1beta1.AcceleratorQuotaSpec, pending []v1beta1.Reservation) (Admission, bool) {
	if len(pending) == 0 {
		return Admission{}, false
	}
	bound := maps.Clone(tree)
	if bound == nil {
		bound = Tree{}
	}
	var parents map[string]bool // the names some node of tree, or the write, names as its parent
	named := func(n string) bool {
		if parents == nil {
			parents = make(map[string]bool, len(tree)+1)
			for c, sp := range tree {
				if p := parentOf(c, sp); p != c {
					parents[p] = true
				}
			}
			if spec != nil {
				parents[parentOf(name, spec)] = true
			}
		}
		return parents[n]
	}
	seen := make(map[string]bool, len(pending))
	for _, r := range pending {
		if r.Node == name || r.Node == v1beta1.RootName || seen[r.Node] {
			return Admission{}, false
		}
		seen[r.Node] = true
		cur := tree[r.Node]
		switch {
		case cur != nil && r.Spec != nil && SameSeat(r.Node, cur, r.Spec) && Within(r.Node, r.Spec, cur):
			bound[r.Node] = r.Spec
		case cur == nil && r.Spec != nil && r.Operation == "CREATE" && r.Spec.Role == v1beta1.RoleClusterQueue && !named(r.Node):
			bound[r.Node] = r.Spec
		case cur != nil && r.Spec == nil && cur.Role == v1beta1.RoleClusterQueue && !named(r.Node):
			// A delete: the team stays on the bounding combination.
		default:
			return Admission{}, false
		}
	}
	a := Admit(bound, marks, flavors, cfg, name, spec)
	return a, a.Allowed
}
