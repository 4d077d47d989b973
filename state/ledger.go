package state

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

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

// NeverAt reports whether the state shows that node name, with uid, never
// had version base: it has applied every version up to base (Progress)
// and holds that life of the node at an older one. A write judged on such
// a version was never sent by the API server.
func (s *State) NeverAt(name, uid string, base uint64) bool {
	m := s.members[name]
	return base > 0 && s.progress >= base && m != nil && uid != "" && m.uid == uid && m.version < base
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
// and cfg) beside any number of reserved writes that may land, where
// AdmitUncertain, which tries every combination, is bounded by
// MaxUncertain. It splits them in two:
//
//   - the bounded: the reserved writes, of any kind (a create, a delete,
//     an update, a move, a standing reservation, whose writes are each
//     within its spec), of a node that is not root, not the written one,
//     and that nothing names as its parent but other bounded writes: no
//     node of tree, not the write, no other reserved write. A node that
//     bounded writes name keeps one parent on every outcome. They are
//     laid on the tree at their bound: each such node present, under each
//     parent some outcome gives it, with per (resource, flavor) the
//     largest nominal its outcomes there give it (the node as the tree
//     holds it and each reserved spec). A node under two parents is under
//     one by its name and under the other by a name of its own, which the
//     answer maps back;
//   - the rest, at most MaxUncertain (else it reports false, having
//     judged nothing), whose every combination is tried on that bound; a
//     standing one among them must be a team's (its writes, within its
//     spec, then weigh no more than its spec: a team's budgets cap
//     nothing).
//
// It reports the first refusal, with false, or the admission, with true.
//
// Why a write admitted there is admitted on every outcome of the bounded
// writes (docs/webhook.md argues it in full): a bounded node's children,
// on any outcome, are bounded nodes, which the bound holds too, so the
// rules read a bounded node from elsewhere only through its parent: the
// parent's children's total, and its list of children. What they read of
// the node itself (its spec, its place, its parent's role, its children's
// total) does not change with the write, which is of another node and
// names none of them, or changes alike on every outcome where the node
// exists (its place and its parent's role do not depend on its spec or
// its children, and a node with children has one parent), and the bound
// holds the node wherever an outcome does. Per Cohort and pair, the
// overrun before the write is the children's total less the budget,
// largest on the bound; the write moves it by an amount of its own, the
// same on every outcome, and is refused on that key when the overrun
// after it is above 0 and it raised it, which, holding on an outcome,
// holds on the bound. A delete of a parent is refused on the bound
// whenever it is on an outcome: the bound holds every child some outcome
// holds.
func AdmitDominated(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config,
	name string, spec *v1beta1.AcceleratorQuotaSpec, pending []v1beta1.Reservation) (Admission, bool) {
	if len(pending) == 0 {
		return Admission{}, false
	}
	byNode := map[string][]int{}
	for i := range pending {
		byNode[pending[i].Node] = append(byNode[pending[i].Node], i)
	}
	// named: the parents that a node of tree, or the write, names.
	named := make(map[string]bool, len(tree)+1)
	for c, sp := range tree {
		if p := parentOf(c, sp); p != c {
			named[p] = true
		}
	}
	if spec != nil {
		named[parentOf(name, spec)] = true
	}
	bounded := map[string]bool{}
	for n := range byNode {
		bounded[n] = n != name && n != v1beta1.RootName && !named[n]
	}
	// parents counts the parents a node has on its outcomes.
	parents := func(n string) int {
		seen := map[string]bool{}
		if sp := tree[n]; sp != nil {
			seen[parentOf(n, sp)] = true
		}
		for _, i := range byNode[n] {
			if sp := pending[i].Spec; sp != nil {
				seen[parentOf(n, sp)] = true
			}
		}
		return len(seen)
	}
	// A reserved write that is not bounded names its parent: that parent
	// is not bounded either, and so on up. A bounded node that bounded
	// writes name (children on some outcome) must keep one parent on
	// every outcome: their places hang on its.
	for changed := true; changed; {
		changed = false
		kids := map[string]bool{}
		for i := range pending {
			r := &pending[i]
			if r.Spec == nil {
				continue
			}
			p := parentOf(r.Node, r.Spec)
			switch {
			case p == r.Node:
			case !bounded[r.Node] && bounded[p]:
				bounded[p], changed = false, true
			case bounded[r.Node]:
				kids[p] = true
			}
		}
		for p := range kids {
			if bounded[p] && parents(p) > 1 {
				bounded[p], changed = false, true
			}
		}
	}
	var rest []v1beta1.Reservation
	for i := range pending {
		r := pending[i]
		if bounded[r.Node] {
			continue
		}
		if Standing(&r) && (r.Spec == nil || r.Spec.Role != v1beta1.RoleClusterQueue) {
			// Tried at its spec alone, a standing reservation bounds the
			// writes it stands for only on a team, whose budgets cap
			// nothing: the webhook makes no other.
			return Admission{}, false
		}
		rest = append(rest, r)
	}
	if len(rest) > MaxUncertain {
		return Admission{}, false
	}
	// The bound of each bounded node: per parent, its largest budgets.
	type laid struct {
		name string // the node's, or a name of its own under another parent
		spec *v1beta1.AcceleratorQuotaSpec
	}
	var lay []laid
	alias := map[string]string{} // a name of its own -> the node's
	for _, n := range slices.Sorted(maps.Keys(byNode)) {
		if !bounded[n] {
			continue
		}
		outcomes := []*v1beta1.AcceleratorQuotaSpec{tree[n]}
		for _, i := range byNode[n] {
			outcomes = append(outcomes, pending[i].Spec)
		}
		byParent := map[string][]*v1beta1.AcceleratorQuotaSpec{}
		for _, sp := range outcomes {
			if sp != nil {
				p := parentOf(n, sp)
				byParent[p] = append(byParent[p], sp)
			}
		}
		own := ""
		if cur := tree[n]; cur != nil {
			own = parentOf(n, cur)
		} else if len(byParent) > 0 {
			own = slices.Sorted(maps.Keys(byParent))[0]
		}
		for _, p := range slices.Sorted(maps.Keys(byParent)) {
			as := n
			if p != own {
				as = n + "\x00" + p
				alias[as] = n
			}
			lay = append(lay, laid{as, largest(byParent[p])})
		}
	}
	for mask := 0; mask < 1<<len(rest); mask++ {
		t := maps.Clone(tree)
		if t == nil {
			t = Tree{}
		}
		for i, r := range rest {
			if mask&(1<<i) == 0 {
				continue
			}
			if r.Spec == nil {
				delete(t, r.Node)
			} else {
				t[r.Node] = r.Spec
			}
		}
		for n := range bounded {
			if bounded[n] {
				delete(t, n)
			}
		}
		for _, l := range lay {
			t[l.name] = l.spec
		}
		if a := Admit(t, marks, flavors, cfg, name, spec); !a.Allowed {
			return unalias(a, alias), false
		}
	}
	return Admission{Allowed: true}, true
}

// largest is the first of specs with, per (resource, flavor), the largest
// total nominal any of them gives it: one budget per pair.
func largest(specs []*v1beta1.AcceleratorQuotaSpec) *v1beta1.AcceleratorQuotaSpec {
	top := map[Pair]Amount{}
	for _, sp := range specs {
		sum := map[Pair]Amount{}
		for _, b := range BudgetsOf(sp) {
			sum[b.Pair] += b.Nominal
		}
		for p, a := range sum {
			top[p] = max(top[p], a)
		}
	}
	out := specs[0].DeepCopy()
	out.Budgets = nil
	for _, p := range slices.SortedFunc(maps.Keys(top), func(a, b Pair) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Flavor, b.Flavor))
	}) {
		out.Budgets = append(out.Budgets, v1beta1.Budget{ResourceName: p.Resource, ResourceFlavor: p.Flavor, Nominal: top[p].Quantity()})
	}
	return out
}

// unalias names each node of a refusal by its own name, not by the one it
// had in the bound under another parent.
func unalias(a Admission, alias map[string]string) Admission {
	for as, n := range alias {
		a.Message = strings.ReplaceAll(a.Message, as, n)
		for i := range a.Denied {
			a.Denied[i].Node = strings.ReplaceAll(a.Denied[i].Node, as, n)
			a.Denied[i].Message = strings.ReplaceAll(a.Denied[i].Message, as, n)
		}
	}
	return a
}
