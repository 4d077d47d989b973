package state

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// pass is the work one event leaves for settle: the nodes whose own rules
// must run again, the nodes whose frozen cause must be found again, and the
// nodes whose status may have changed.
type pass struct {
	eval    map[string]struct{}
	freeze  []string
	touched map[string]struct{}
}

func newPass() pass {
	return pass{eval: map[string]struct{}{}, touched: map[string]struct{}{}}
}

// upsertQuota applies an AcceleratorQuota's new spec. Its cost is
// O(depth + children) when the node is created or moves (walking up for a
// loop of parentRefs), O(1) in the rules for a change of budgets, plus the
// subtree of a node whose place or state flips.
func (s *State) upsertQuota(q *events.Quota, version uint64) {
	name := q.Name
	if name == v1beta1.RootName {
		s.rootSeen = true
		s.reported = normalizeCapacity(q.Capacity)
		if !s.synced {
			s.seed(s.reported)
		}
		s.seedMembers(s.reported)
	}
	spec := &q.Spec // events are never modified once published: keep it
	s.written.note(name, spec, len(s.members))
	sh := shapeOf(name, spec)
	m := s.members[name]
	if m == nil || m.gen != q.Generation || !m.shape.equal(sh) {
		// A status written back (the manager's own, most often) leaves the
		// generation alone and changes nothing the projection reads.
		s.changedNode(name)
		s.holdsDirty(name)
	}
	if name == v1beta1.RootName {
		s.setGone(spec.GoneClusters)
	}
	if m != nil && m.shape.equal(sh) {
		if m.deleting != q.Deleting {
			s.holdsDirty(name)
			s.changedNode(name)
		}
		m.spec, m.gen, m.uid, m.version, m.stored, m.deleting = spec, q.Generation, q.UID, version, q.Conditions, q.Deleting
		s.setHoldRecord(m, q)
		return
	}
	created := m == nil
	var old shape
	if created {
		m = &member{name: name, phase: PhasePending, place: Place{Depth: -1}, rev: s.seq, since: Since{s.now, s.now}}
		s.members[name] = m
	} else {
		old = m.shape
	}
	s.relink(name, old, sh)
	m.spec, m.gen, m.shape, m.uid, m.version, m.stored, m.deleting = spec, q.Generation, sh, q.UID, version, q.Conditions, q.Deleting
	s.setHoldRecord(m, q)
	s.holdsPendingAll() // a budget or a place moved: room may have opened

	s.queue(name)
	s.queue(old.parent)
	s.queue(sh.parent)
	if created || old.role != sh.role {
		for _, k := range s.kids[name] {
			s.queue(k) // their parent's role is a fact of their rules
		}
	}
	if created || old.parent != sh.parent {
		// Its frozen cause comes from its new parent even where its place
		// (a depth) stays the same.
		s.pass.freeze = append(s.pass.freeze, name)
		s.replace(name, created)
	}
	if s.synced {
		s.measure() // writing a node of the tree is a measurement
	}
}

// deleteQuota removes a node; its children lose their parent.
func (s *State) deleteQuota(name string) {
	if name == v1beta1.RootName {
		s.rootSeen, s.reported = false, nil
	}
	m := s.members[name]
	if m == nil {
		return
	}
	s.changedNode(name)
	s.holdsPendingAll()
	s.relink(name, m.shape, shape{})
	delete(s.members, name)
	s.written.note(name, nil, len(s.members))
	move(s.machine, CauseTree, name, m.phase, PhaseDeleted, "", "")
	s.queue(m.shape.parent)
	for _, k := range s.kids[name] {
		s.replace(k, false)
	}
	if s.synced {
		s.measure()
	}
}

// relink moves a node in the indexes from its old shape to its new one
// (the zero shape for none): its parent's children and sums, and the
// budget indexes. It touches only what differs: a budget change under the
// same parent costs O(budgets).
func (s *State) relink(name string, old, sh shape) {
	if old.parent != sh.parent {
		if p := old.parent; p != "" {
			kids := s.kids[p]
			if i, ok := slices.BinarySearch(kids, name); ok {
				kids = slices.Delete(kids, i, i+1)
			}
			if len(kids) == 0 {
				delete(s.kids, p)
			} else {
				s.kids[p] = kids
			}
		}
		if p := sh.parent; p != "" {
			kids := s.kids[p]
			i, _ := slices.BinarySearch(kids, name)
			s.kids[p] = slices.Insert(kids, i, name)
		}
	}
	s.addSums(old.parent, old.budgets, -1)
	s.addSums(sh.parent, sh.budgets, +1)
	if !samePairs(old.budgets, sh.budgets) {
		for _, b := range old.budgets {
			dropIndex(s.byPair, b.Pair, name)
			dropIndex(s.byFlavor, b.Flavor, name)
		}
		for _, b := range sh.budgets {
			addIndex(s.byPair, b.Pair, name)
			addIndex(s.byFlavor, b.Flavor, name)
		}
	}
}

// addSums adds (sign +1) or removes (-1) budgets to parent's children's
// sums, keeping no zero sum.
func (s *State) addSums(parent string, budgets []Budget, sign Amount) {
	if parent == "" {
		return
	}
	for _, b := range budgets {
		if b.Nominal == 0 {
			continue
		}
		sums := s.sums[parent]
		if sums == nil {
			sums = map[Pair]Total{}
			s.sums[parent] = sums
		}
		if sums[b.Pair] = sums[b.Pair].Add(sign * b.Nominal); sums[b.Pair].IsZero() {
			delete(sums, b.Pair)
			if len(sums) == 0 {
				delete(s.sums, parent)
			}
		}
	}
}

func samePairs(a, b []Budget) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Pair != b[i].Pair {
			return false
		}
	}
	return true
}

func addIndex[K comparable](idx map[K]map[string]struct{}, k K, name string) {
	set := idx[k]
	if set == nil {
		set = map[string]struct{}{}
		idx[k] = set
	}
	set[name] = struct{}{}
}

func dropIndex[K comparable](idx map[K]map[string]struct{}, k K, name string) {
	if set := idx[k]; set != nil {
		delete(set, name)
		if len(set) == 0 {
			delete(idx, k)
		}
	}
}

// queue asks for a node's own rules to run again, if it exists.
func (s *State) queue(name string) {
	if _, ok := s.members[name]; ok {
		s.pass.eval[name] = struct{}{}
	}
}

// replace finds the place of start again, and of its descendants as far as
// theirs change (all of them when force).
func (s *State) replace(start string, force bool) {
	m := s.members[start]
	np := s.placeOf(start)
	if !np.Equal(m.place) {
		m.place = np
		s.moved(start)
	} else if !force {
		return
	}
	s.descend(start, np, func(n string) Place { return s.members[n].place }, func(k string, kp Place) {
		s.members[k].place = kp
		s.moved(k)
	})
}

// descend walks down from start, whose place is now np, finding each
// descendant's place from its parent's (placeOf, which sees what set
// recorded) and calling set for each whose place differs from the one the
// state keeps, parents before children. Where a place is unchanged, so are
// the places below it. start must be the only node whose parent changed.
func (s *State) descend(start string, np Place, placeOf func(string) Place, set func(string, Place)) {
	var loop map[string]int
	if np.Reason == ReasonParentCycle {
		loop = make(map[string]int, len(np.Cycle))
		for i, n := range np.Cycle {
			loop[n] = i
		}
	}
	visited := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, k := range s.kids[n] {
			if visited[k] {
				continue
			}
			visited[k] = true
			var kp Place
			if i, ok := loop[k]; ok {
				kp = cyclePlace(np.Cycle, i)
			} else {
				kp = childPlace(n, placeOf(n))
			}
			if kp.Equal(s.members[k].place) {
				continue // so are its descendants'
			}
			set(k, kp)
			queue = append(queue, k)
		}
	}
}

// moved records that a node's place changed: its depth and chain rules, and
// its frozen cause, must be found again.
func (s *State) moved(name string) {
	s.pass.eval[name] = struct{}{}
	s.pass.freeze = append(s.pass.freeze, name)
}

// placeOf is the place of a node whose parent's place is up to date unless
// the node is on a loop of parentRefs, which it walks up to find out:
// O(depth).
func (s *State) placeOf(name string) Place {
	if name == v1beta1.RootName {
		return rootPlace
	}
	p := s.members[name].shape.parent
	if p == "" || s.members[p] == nil {
		return missingPlace(p)
	}
	// Walk up from the parent; a loop that does not pass through name is
	// cut off after as many steps as there are nodes.
	path := []string{name}
	for cur, steps := p, 0; steps < len(s.members); steps++ {
		if cur == name {
			return cyclePlace(path, 0)
		}
		cm := s.members[cur]
		if cm == nil || cm.shape.parent == "" {
			break
		}
		path = append(path, cur)
		cur = cm.shape.parent
	}
	return childPlace(p, s.members[p].place)
}

// settle runs the rules of the queued nodes, finds frozen causes again top
// down, and moves each touched node's state machine, in name order.
func (s *State) settle() {
	ps := &s.pass
	for name := range ps.eval {
		m := s.members[name]
		if m == nil {
			continue // deleted by this event after being queued
		}
		before := primary(m.viols)
		m.viols = s.evaluate(m)
		if primary(m.viols) != before {
			ps.freeze = append(ps.freeze, s.kids[name]...)
		}
		ps.touched[name] = struct{}{}
	}
	clear(ps.eval)
	s.refreeze()
	if len(ps.touched) == 0 {
		s.settleHolds()
		return
	}
	names := make([]string, 0, len(ps.touched))
	for name := range ps.touched {
		names = append(names, name)
	}
	clear(ps.touched)
	slices.Sort(names)
	for _, name := range names {
		m := s.members[name]
		if m == nil {
			continue
		}
		phase, reason, msg := m.settled()
		if phase != m.phase || msg != m.message {
			s.changedNode(name)
		}
		m.message = msg
		if phase != m.phase {
			move(s.machine, s.cause, name, m.phase, phase, reason, msg)
			ready, materialized := m.ready(), m.materialized()
			m.phase = phase
			s.restamp(m, ready, materialized)
		}
		s.holdsDirty(name)
	}
	s.settleHolds()
}

// evaluate runs the rule book on one node.
func (s *State) evaluate(m *member) []Violation {
	f := &s.facts
	*f = Facts{Name: m.name, Spec: m.spec, Budgets: m.shape.budgets, Place: m.place}
	if p := s.members[m.shape.parent]; p != nil && m.shape.parent != "" {
		f.ParentRole = p.shape.role
	}
	viols := EvaluateNode(nil, f, s)
	if !slices.EqualFunc(m.splits, f.Splits, BudgetSplit.equal) {
		// The node's copies change, and so may its ancestors': a Cohort
		// is copied to the members where some team below it has a share.
		// At most one step per node: a loop of parentRefs ends the walk.
		for cur, steps := m, 0; cur != nil && steps <= len(s.members); cur, steps = s.members[cur.shape.parent], steps+1 {
			s.changedNode(cur.name)
			if cur.shape.parent == "" {
				break
			}
		}
	}
	m.splits = f.Splits
	return viols
}

// primary is the primary reason of a node's own violations, "" for none.
func primary(v []Violation) Reason {
	if len(v) == 0 {
		return ""
	}
	return v[0].Reason
}

// settled is the phase, reason and message that a node's violations and
// frozen cause give it. With several violations of its primary reason, the
// message lists them, at most MaxListed, and counts the rest.
func (m *member) settled() (Phase, Reason, string) {
	if len(m.viols) > 0 {
		r := m.viols[0].Reason
		var msgs []string
		more := 0
		for _, v := range m.viols {
			switch {
			case v.Reason != r:
			case len(msgs) == MaxListed:
				more++
			default:
				msgs = append(msgs, v.Message)
			}
		}
		if more > 0 {
			msgs = append(msgs, fmt.Sprintf("and %d more", more))
		}
		return Phase(r), r, strings.Join(msgs, "; ")
	}
	if m.frozenBy != "" {
		return PhaseFrozen, ReasonFrozen, frozenMessage(m.frozenBy, m.frozenAs)
	}
	return PhaseReady, ReasonAdmitted, MessageAdmitted
}

// refreeze finds the frozen cause of the queued nodes again, parents before
// children, and goes down to the children of those whose cause changed.
func (s *State) refreeze() {
	ps := &s.pass
	if len(ps.freeze) == 0 {
		return
	}
	h := &depthHeap{}
	queued := map[string]bool{}
	push := func(name string) {
		m := s.members[name]
		if m == nil || queued[name] {
			return
		}
		queued[name] = true
		heap.Push(h, depthItem{m.place.Depth, name})
	}
	for _, name := range ps.freeze {
		push(name)
	}
	ps.freeze = ps.freeze[:0]
	for h.Len() > 0 {
		m := s.members[heap.Pop(h).(depthItem).name]
		by, as := "", Reason("")
		if m.place.Reason == "" && m.shape.parent != "" {
			p := s.members[m.shape.parent]
			if len(p.viols) > 0 {
				by, as = p.name, p.viols[0].Reason
			} else {
				by, as = p.frozenBy, p.frozenAs
			}
		}
		if by == m.frozenBy && as == m.frozenAs {
			continue
		}
		m.frozenBy, m.frozenAs = by, as
		ps.touched[m.name] = struct{}{}
		if m.place.Reason == "" && len(m.viols) == 0 {
			// Its children take its cause; a node that breaks a rule
			// itself is their cause whatever freezes it.
			for _, k := range s.kids[m.name] {
				push(k)
			}
		}
	}
}

type depthItem struct {
	depth int
	name  string
}

// depthHeap orders nodes by depth, then name.
type depthHeap []depthItem

func (h depthHeap) Len() int { return len(h) }
func (h depthHeap) Less(i, j int) bool {
	if h[i].depth != h[j].depth {
		return h[i].depth < h[j].depth
	}
	return h[i].name < h[j].name
}
func (h depthHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *depthHeap) Push(x any)   { *h = append(*h, x.(depthItem)) }
func (h *depthHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
