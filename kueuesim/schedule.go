package kueuesim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// EventKind is what happened to a Workload in a simulation.
type EventKind string

const (
	// Admitted: the Workload got its quota.
	Admitted EventKind = "Admitted"
	// Preempted: the Workload was evicted to make room for By.
	Preempted EventKind = "Preempted"
)

// Event is one admission or preemption, in the order the simulation made
// them. The targets of one preemptor come in the order Kueue considers
// its candidates (Kueue evicts them at once).
type Event struct {
	Kind EventKind
	W    *Workload
	// By is the Workload a preemption made room for; Reason is Kueue's
	// (InClusterQueue, InCohortReclamation, InCohortReclaimWhileBorrowing).
	By     *Workload
	Reason string
	// Cycle is the scheduling cycle, from 1.
	Cycle int
}

// Submit adds a pending Workload to its queue.
func (s *Sim) Submit(w *Workload) error {
	q := s.queues[w.Queue]
	if q == nil {
		return fmt.Errorf("ClusterQueue %q does not exist", w.Queue)
	}
	w.Admitted = false
	q.pending = append(q.pending, w)
	q.sortPending()
	return nil
}

// Claim is a hypothetical Workload of one pod asking for amount of fr in
// queue, at priority, whose pod selects fr's flavor only: the work a team
// brings when it wants its quota back. Submit it to simulate it.
func (s *Sim) Claim(queue, name string, fr FR, amount, priority int64) *Workload {
	s.claims++
	return &Workload{
		Name: name, UID: fmt.Sprintf("~claim-%06d", s.claims), Queue: queue, Priority: priority,
		QueuedAt: s.now, Hypothetical: true,
		PodSets: []PodSet{{Name: "main", Count: 1, Requests: map[string]int64{fr.Resource: amount}, Flavor: fr.Flavor}},
	}
}

// buffers are Run's, kept from one run to the next.
type buffers struct {
	entries                         []entry
	nominated, admitted, preemptors []*entry
	temporary                       []delta
	parked, preempted               map[*Workload]bool
}

type entry struct {
	w       *Workload
	q       *Queue
	a       Assignment
	targets []Target
}

// Run runs Kueue's scheduling cycles until one changes nothing, and
// returns the admissions and preemptions in order. An error says that it
// did not settle within its bound of cycles.
func (s *Sim) Run() ([]Event, error) {
	var out []Event
	limit := 10 + 4*s.workloadCount()
	// The cycles' buffers, kept from one cycle, and one run, to the next.
	b := &s.buffers
	if b.parked == nil {
		b.parked, b.preempted = map[*Workload]bool{}, map[*Workload]bool{}
	}
	clear(b.parked)
	parked, preempted := b.parked, b.preempted
	entries, nominated, admitted, preemptors, temporary := b.entries, b.nominated, b.admitted, b.preemptors, b.temporary
	defer func() {
		b.entries, b.nominated, b.admitted, b.preemptors, b.temporary = entries, nominated, admitted, preemptors, temporary
	}()
	for cycle := 1; ; cycle++ {
		if cycle > limit {
			return out, fmt.Errorf("the simulation of Kueue's scheduler did not settle after %d cycles", limit)
		}
		entries = entries[:0]
		for _, q := range s.sorted {
			if len(q.pending) == 0 {
				continue
			}
			if w := q.head(parked); w != nil {
				entries = append(entries, entry{w: w, q: q})
			}
		}
		if len(entries) == 0 {
			return out, nil
		}
		changed := false
		nominated = nominated[:0]
		for i := range entries {
			e := &entries[i]
			if why := e.q.refuses(e.w); why != "" {
				parked[e.w], changed = true, true
				continue
			}
			e.a, e.targets = s.assign(e.w, e.q), nil
			if e.a.Mode == Preempt && e.q.canPreempt() {
				p := &preemption{s: s, preemptor: e.w, cq: e.q, frsNeed: e.a.need, requests: e.a.Usage}
				e.targets = p.targets()
			}
			nominated = append(nominated, e)
		}
		slices.SortStableFunc(nominated, func(a, b *entry) int {
			return cmp.Or(cmp.Compare(a.a.Borrow, b.a.Borrow), cmp.Compare(b.w.Priority, a.w.Priority),
				a.w.QueuedAt.Compare(b.w.QueuedAt), cmp.Compare(a.w.UID, b.w.UID))
		})
		// Usage added within the cycle (an admission, a preemptor's, a
		// reservation), undone at its end, as Kueue drops its snapshot;
		// admissions are then counted afresh, as its cache counts them.
		temporary = temporary[:0]
		add := func(q *Queue, u Amounts) {
			for _, x := range u {
				q.addUsageLogged(x.id, x.V, &temporary)
			}
		}
		clear(preempted)
		admitted, preemptors = admitted[:0], preemptors[:0]
		for _, e := range nominated {
			switch {
			case e.a.Mode == NoFit:
				if !parked[e.w] {
					parked[e.w], changed = true, true
				}
				continue
			case e.a.Mode == Preempt && len(e.targets) == 0:
				if e.q.Preemption.ReclaimWithinCohort != kueue.PreemptionPolicyAny {
					reserve(e, &temporary)
				}
				if !parked[e.w] && !e.q.StrictFIFO {
					parked[e.w], changed = true, true
				}
				continue
			}
			overlap := false
			for _, t := range e.targets {
				overlap = overlap || preempted[t.W]
			}
			if overlap || !s.fitsWithout(e, preempted) {
				continue
			}
			for _, t := range e.targets {
				preempted[t.W] = true
			}
			if e.a.Mode == Preempt {
				add(e.q, e.a.Usage)
				preemptors = append(preemptors, e)
				continue
			}
			add(e.q, e.a.Usage)
			admitted = append(admitted, e)
		}
		for i := len(temporary) - 1; i >= 0; i-- {
			temporary[i].n.usage[temporary[i].i] -= temporary[i].v
		}
		for _, e := range admitted {
			e.q.pending = slices.DeleteFunc(e.q.pending, func(w *Workload) bool { return w == e.w })
			e.w.Usage, e.w.usage, e.w.ReservedAt, e.w.Evicted = e.a.Usage.Map(), e.a.Usage, s.now, false
			s.admit(e.q, e.w)
			if e.q.sticky == e.w {
				e.q.sticky = nil
			}
			out = append(out, Event{Kind: Admitted, W: e.w, Cycle: cycle})
			changed = true
		}
		freed := false
		for _, e := range preemptors {
			e.q.sticky = e.w
			ts := slices.Clone(e.targets)
			slices.SortFunc(ts, func(a, b Target) int { return s.order(e.q.Name, a.W, b.W) })
			for _, t := range ts {
				s.remove(t.W)
				t.W.Admitted, t.W.Evicted = false, false
				q := s.queues[t.W.Queue]
				q.pending = append(q.pending, t.W)
				q.sortPending()
				out = append(out, Event{Kind: Preempted, W: t.W, By: e.w, Reason: t.Reason, Cycle: cycle})
				freed = true
			}
			changed = true
		}
		if freed {
			// Quota was released: Kueue moves the inadmissible Workloads
			// back into their queues.
			clear(parked)
		}
		if !changed {
			return out, nil
		}
	}
}

func (s *Sim) workloadCount() int {
	n := 0
	for _, q := range s.queues {
		n += len(q.admitted) + len(q.pending)
	}
	return n
}

// head is the queue's next Workload to nominate: the sticky preemptor,
// else the first pending one not parked (StrictFIFO: the first, unless it
// is parked).
func (q *Queue) head(parked map[*Workload]bool) *Workload {
	if q.Inactive != "" {
		return nil
	}
	if q.sticky != nil && slices.Contains(q.pending, q.sticky) {
		return q.sticky
	}
	for _, w := range q.pending {
		if !parked[w] {
			return w
		}
		if q.StrictFIFO {
			return nil
		}
	}
	return nil
}

// refuses says why the queue does not consider w at all: its namespace is
// not one the queue selects.
func (q *Queue) refuses(w *Workload) string {
	if w.Hypothetical {
		return ""
	}
	ok, known := q.selects[w.Namespace]
	if !known {
		ok = q.Selector.Matches(labels.Set{corev1.LabelMetadataName: w.Namespace})
		if q.selects == nil {
			q.selects = map[string]bool{}
		}
		q.selects[w.Namespace] = ok
	}
	if !ok {
		return "Workload namespace doesn't match ClusterQueue selector"
	}
	return ""
}

// fitsWithout is the scheduler's fits: the entry's usage fits once the
// Workloads preempted in this cycle and its own targets are gone.
func (s *Sim) fitsWithout(e *entry, preempted map[*Workload]bool) bool {
	gone := slices.Collect(maps.Keys(preempted))
	for _, t := range e.targets {
		if !preempted[t.W] {
			gone = append(gone, t.W)
		}
	}
	for _, w := range gone {
		s.remove(w)
	}
	fits := true
	for _, x := range e.a.Usage {
		if max(0, e.q.available(x.id)) < x.V {
			fits = false
		}
	}
	for _, w := range gone {
		s.restore(w)
	}
	return fits
}

// reserve is quotaResourcesToReserve for a Workload that needs preemption
// and found no targets: it holds that capacity for the rest of the cycle.
func reserve(e *entry, log *[]delta) {
	for _, x := range e.a.Usage {
		q := e.q.quota[x.id]
		v := max(0, min(x.V, q.Nominal-e.q.usage[x.id]))
		if e.a.Borrow > 0 {
			v = x.V
			if q.BorrowingLimit != nil {
				v = min(x.V, q.Nominal+*q.BorrowingLimit-e.q.usage[x.id])
			}
		}
		e.q.addUsageLogged(x.id, v, log)
	}
}

// Excess are the admitted Workloads of queue that hold its usage of fr
// above limit, as Kueue's preemption would pick them to bring the queue
// within it: in candidate order (lower priority, then most recently
// admitted, first) until the rest fits, then without those the rest fits
// without, in Kueue's candidate order.
func (s *Sim) Excess(queue string, fr FR, limit int64) []*Workload {
	q := s.queues[queue]
	if q == nil || q.Usage(fr) <= limit {
		return nil
	}
	var ws []*Workload
	for _, w := range q.admitted {
		if w.Usage[fr] > 0 {
			ws = append(ws, w)
		}
	}
	slices.SortFunc(ws, func(a, b *Workload) int { return s.order(queue, a, b) })
	used := q.Usage(fr)
	var taken []*Workload
	for _, w := range ws {
		taken = append(taken, w)
		used -= w.Usage[fr]
		if used <= limit {
			break
		}
	}
	for i := len(taken) - 2; i >= 0; i-- {
		if used+taken[i].Usage[fr] <= limit {
			used += taken[i].Usage[fr]
			taken[i] = taken[len(taken)-1]
			taken = taken[:len(taken)-1]
		}
	}
	slices.SortFunc(taken, func(a, b *Workload) int { return s.order(queue, a, b) })
	return taken
}

// Nominate is what one scheduling cycle decides for a pending Workload
// of its queue, with the tree as it is: its flavor assignment and, when it
// needs preemption, the Workloads Kueue would evict for it, in Kueue's
// candidate order (getInitialAssignments without partial admission).
func (s *Sim) Nominate(w *Workload) (Assignment, []Target) {
	q := s.queues[w.Queue]
	if q == nil {
		return Assignment{Mode: NoFit, Reasons: []string{fmt.Sprintf("ClusterQueue %s not found", w.Queue)}}, nil
	}
	s.explain = true
	a := s.assign(w, q)
	s.explain = false
	if a.Mode != Preempt {
		return a, nil
	}
	p := &preemption{s: s, preemptor: w, cq: q, frsNeed: a.need, requests: a.Usage}
	targets := p.targets()
	slices.SortFunc(targets, func(x, y Target) int { return s.order(q.Name, x.W, y.W) })
	return a, targets
}

// Withdraw takes a pending Workload out of its queue.
func (s *Sim) Withdraw(w *Workload) {
	if q := s.queues[w.Queue]; q != nil {
		q.pending = slices.DeleteFunc(q.pending, func(p *Workload) bool { return p == w })
		if q.sticky == w {
			q.sticky = nil
		}
	}
}
