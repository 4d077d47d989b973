package kueuesim

import (
	"cmp"
	"slices"
	"sort"
	"time"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Target is a Workload that preemption evicts, with Kueue's reason
// (InClusterQueue, InCohortReclamation, InCohortReclaimWhileBorrowing).
type Target struct {
	W      *Workload
	Reason string
}

// variant is how a candidate may be preempted (classical/preemptionVariant).
type variant int

const (
	never variant = iota
	withinCQ
	hierarchicalReclaim
	reclaimWithoutBorrowing
	reclaimWhileBorrowing
)

func (v variant) reason() string {
	switch v {
	case withinCQ:
		return kueue.InClusterQueueReason
	case hierarchicalReclaim, reclaimWithoutBorrowing:
		return kueue.InCohortReclamationReason
	case reclaimWhileBorrowing:
		return kueue.InCohortReclaimWhileBorrowingReason
	}
	return "Unknown"
}

type candidate struct {
	w *Workload
	// lca is the Cohort below which the candidate's ancestors are
	// checked for borrowing; nil for the preemptor's own queue.
	lca *Cohort
	v   variant
}

// preemption is one search for targets (Kueue's preemptionCtx with the
// hierarchical reclaim context).
type preemption struct {
	s         *Sim
	preemptor *Workload
	cq        *Queue
	frsNeed   []int
	requests  Amounts
}

// satisfies is SatisfiesPreemptionPolicy.
func satisfies(preemptor, candidate *Workload, policy kueue.PreemptionPolicy) bool {
	lower := preemptor.Priority > candidate.Priority
	switch policy {
	case kueue.PreemptionPolicyLowerPriority:
		return lower
	case kueue.PreemptionPolicyLowerOrNewerEqualPriority:
		return lower || (preemptor.Priority == candidate.Priority && preemptor.QueuedAt.Before(candidate.QueuedAt))
	}
	return policy == kueue.PreemptionPolicyAny
}

// usesResources: w holds one of the pairs frs (WorkloadUsesResources).
func (s *Sim) usesResources(w *Workload, frs []int) bool {
	for _, u := range s.usageOf(w) {
		if slices.Contains(frs, u.id) {
			return true
		}
	}
	return false
}

func borrowForbidden(q *Queue) (bool, *int32) {
	if q.Preemption.BorrowWithinCohort == kueue.BorrowWithinCohortPolicyNever || q.Preemption.BorrowWithinCohort == "" {
		return true, nil
	}
	return false, q.Preemption.MaxPriorityThreshold
}

func (p *preemption) classify(w *Workload, advantage bool) variant {
	if !p.s.usesResources(w, p.frsNeed) {
		return never
	}
	policy := p.cq.Preemption.ReclaimWithinCohort
	if w.Queue == p.cq.Name {
		policy = p.cq.Preemption.WithinClusterQueue
	}
	if !satisfies(p.preemptor, w, policy) {
		return never
	}
	if w.Queue == p.cq.Name {
		return withinCQ
	}
	if advantage {
		return hierarchicalReclaim
	}
	forbidden, threshold := borrowForbidden(p.cq)
	if forbidden {
		return reclaimWithoutBorrowing
	}
	if w.Priority >= p.preemptor.Priority || (threshold != nil && w.Priority > int64(*threshold)) {
		return reclaimWithoutBorrowing
	}
	return reclaimWhileBorrowing
}

func (p *preemption) fromQueue(q *Queue, lca *Cohort, advantage bool, out *[]candidate) {
	for _, w := range q.admitted {
		if v := p.classify(w, advantage); v != never {
			*out = append(*out, candidate{w: w, lca: lca, v: v})
		}
	}
}

// collect gathers the candidates in the preemptor's queue, those over
// which it has a hierarchical advantage, and those it may take by
// priority (collectSameQueueCandidates, collectCandidatesForHierarchicalReclaim).
func (p *preemption) collect() (same, hierarchy, prio []candidate) {
	if p.cq.Preemption.WithinClusterQueue != kueue.PreemptionPolicyNever {
		p.fromQueue(p.cq, nil, false, &same)
	}
	if p.cq.parent == nil || p.cq.Preemption.ReclaimWithinCohort == kueue.PreemptionPolicyNever {
		return same, hierarchy, prio
	}
	advantage, remaining := p.cq.fitsInQuota(p.requests)
	var previous *Cohort
	for cur := p.cq.parent; cur != nil; cur = cur.parent {
		list := &prio
		if advantage {
			list = &hierarchy
		}
		p.inSubtree(cur, cur, previous, advantage, list)
		var fits bool
		fits, remaining = cur.fitsInQuota(remaining)
		advantage = advantage || fits
		previous = cur
	}
	return same, hierarchy, prio
}

// inSubtree visits the Cohorts and ClusterQueues under current that use
// more than their quota, skipping the subtree already visited.
func (p *preemption) inSubtree(current, root, skip *Cohort, advantage bool, out *[]candidate) {
	for _, ch := range current.cohorts {
		if ch == skip || ch.withinNominal(p.frsNeed) {
			continue
		}
		p.inSubtree(ch, root, skip, advantage, out)
	}
	for _, q := range current.queues {
		if q == p.cq {
			continue
		}
		if !q.withinNominal(p.frsNeed) {
			p.fromQueue(q, root, advantage, out)
		}
	}
}

// candidateOrder is CandidatesOrdering: evicted first, other queues
// first, lower priority first, most recently reserved first, then uid.
func (s *Sim) candidateOrder(cq string) func(a, b candidate) int {
	return func(a, b candidate) int { return s.order(cq, a.w, b.w) }
}

func (s *Sim) order(cq string, a, b *Workload) int {
	if a.Evicted != b.Evicted {
		if a.Evicted {
			return -1
		}
		return 1
	}
	aOther, bOther := a.Queue != cq, b.Queue != cq
	if aOther != bOther {
		if aOther {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Priority, b.Priority), s.reservedAt(b).Compare(s.reservedAt(a)), cmp.Compare(a.UID, b.UID))
}

// reservedAt is when w's quota was reserved; Kueue reads the clock for a
// Workload that has no reservation yet.
func (s *Sim) reservedAt(w *Workload) time.Time {
	if w.ReservedAt.IsZero() {
		return s.now
	}
	return w.ReservedAt
}

// iterator walks the ordered candidates (candidateIterator).
type iterator struct {
	p                       *preemption
	all                     []candidate
	next                    int
	noneFromOtherQueues     bool
	noneForHierarchyReclaim bool
}

func (p *preemption) iterator() *iterator {
	same, hierarchy, prio := p.collect()
	order := p.s.candidateOrder(p.cq.Name)
	for _, l := range [][]candidate{same, hierarchy, prio} {
		slices.SortFunc(l, order)
	}
	split := func(l []candidate) ([]candidate, []candidate) {
		i := sort.Search(len(l), func(i int) bool { return !l[i].w.Evicted })
		return l[:i], l[i:]
	}
	eh, nh := split(hierarchy)
	ep, np := split(prio)
	es, ns := split(same)
	all := make([]candidate, 0, len(same)+len(hierarchy)+len(prio))
	for _, l := range [][]candidate{eh, ep, es, nh, np, ns} {
		all = append(all, l...)
	}
	return &iterator{p: p, all: all, noneFromOtherQueues: len(hierarchy) == 0 && len(prio) == 0, noneForHierarchyReclaim: len(hierarchy) == 0}
}

func (it *iterator) reset() { it.next = 0 }

func (it *iterator) nextCandidate(borrow bool) (candidate, bool) {
	for it.next < len(it.all) {
		c := it.all[it.next]
		it.next++
		if it.valid(c, borrow) {
			return c, true
		}
	}
	return candidate{}, false
}

func (it *iterator) valid(c candidate, borrow bool) bool {
	p := it.p
	if c.w.Queue == p.cq.Name {
		return true
	}
	if borrow && c.v == reclaimWithoutBorrowing {
		return false
	}
	q := p.s.queues[c.w.Queue]
	if q.withinNominal(p.frsNeed) {
		return false
	}
	for n := q.parent; n != nil && n != c.lca; n = n.parent {
		if n.withinNominal(p.frsNeed) {
			return false
		}
	}
	return true
}

// fits is workloadFits: the preemptor's requests fit what its queue has
// available, without borrowing when borrowing is not allowed.
func (p *preemption) fits(allowBorrowing bool) bool {
	for _, r := range p.requests {
		if !allowBorrowing && p.cq.borrowingWith(r.id, r.V) {
			return false
		}
		if r.V > max(0, p.cq.available(r.id)) {
			return false
		}
	}
	return true
}

func (p *preemption) underNominal() bool {
	for _, i := range p.frsNeed {
		if p.cq.usage[i] >= p.cq.nominal(i) {
			return false
		}
	}
	return true
}

// targets is classicalPreemptions: remove candidates in order, while the
// preemptor does not fit, then give back those it fits without, in
// reverse order. The Sim is left as it was.
func (p *preemption) targets() []Target {
	it := p.iterator()
	forbidden, _ := borrowForbidden(p.cq)
	var attempts []bool
	switch {
	case it.noneFromOtherQueues || (forbidden && !p.underNominal()):
		attempts = []bool{true}
	case forbidden && it.noneForHierarchyReclaim:
		attempts = []bool{false, true}
	default:
		attempts = []bool{true, false}
	}
	for _, borrow := range attempts {
		var targets []Target
		it.reset()
		for {
			c, ok := it.nextCandidate(borrow)
			if !ok {
				break
			}
			p.s.remove(c.w)
			targets = append(targets, Target{W: c.w, Reason: c.v.reason()})
			if p.fits(borrow) {
				targets = p.fillBack(targets, borrow)
				for _, t := range targets {
					p.s.restore(t.W)
				}
				return targets
			}
		}
		for _, t := range targets {
			p.s.restore(t.W)
		}
	}
	return nil
}

// fillBack returns, in reverse order, each target but the last that the
// preemptor fits without. Like Kueue, it moves the last target into the
// place of one given back.
func (p *preemption) fillBack(targets []Target, borrow bool) []Target {
	for i := len(targets) - 2; i >= 0; i-- {
		p.s.restore(targets[i].W)
		if p.fits(borrow) {
			targets[i] = targets[len(targets)-1]
			targets = targets[:len(targets)-1]
		} else {
			p.s.remove(targets[i].W)
		}
	}
	return targets
}

// lowestFit is FindHeightOfLowestSubtreeThatFits: how far from q the
// quota for val more of fr comes, and whether q may reclaim it in its
// tree.
func (q *Queue) lowestFit(i int, val int64) (int, bool) {
	if !q.borrowingWith(i, val) || q.parent == nil {
		return 0, q.parent != nil
	}
	remaining := val - q.localAvailable(i)
	for t := q.parent; t != nil; t = t.parent {
		if !t.borrowingWith(i, remaining) {
			return t.height(), t.parent != nil
		}
		remaining -= t.localAvailable(i)
	}
	return q.parent.root().height(), false
}
