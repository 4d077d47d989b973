package kueuesim

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Mode is how a Workload can be admitted (FlavorAssignmentMode).
type Mode int

const (
	NoFit Mode = iota
	Preempt
	Fit
)

func (m Mode) String() string {
	return [...]string{"NoFit", "Preempt", "Fit"}[m]
}

// pmode is the finer mode inside flavor assignment (preemptionMode).
type pmode int

const (
	pNoFit pmode = iota
	pNoCandidates
	pPreempt
	pReclaim
	pFit
)

func (m pmode) mode() Mode {
	switch m {
	case pNoFit:
		return NoFit
	case pFit:
		return Fit
	}
	return Preempt
}

type granular struct {
	p      pmode
	borrow int
}

func worst() granular { return granular{pNoFit, math.MaxInt} }
func best() granular  { return granular{pFit, 0} }

// preferred is isPreferred: a is better than b under the fungibility
// preference (borrowing over preemption unless set otherwise).
func preferred(a, b granular, f kueue.FlavorFungibility) bool {
	if a.p == pNoFit {
		return false
	}
	if b.p == pNoFit {
		return true
	}
	if f.Preference != nil && *f.Preference == kueue.PreemptionOverBorrowing {
		if a.borrow != b.borrow {
			return a.borrow < b.borrow
		}
		return a.p > b.p
	}
	if a.p != b.p {
		return a.p > b.p
	}
	return a.borrow < b.borrow
}

func tryNext(m granular, f kueue.FlavorFungibility) bool {
	if m.p == pNoFit || m.p == pNoCandidates {
		return true
	}
	if (m.p == pPreempt || m.p == pReclaim) && f.WhenCanPreempt == kueue.TryNextFlavor {
		return true
	}
	return m.borrow != 0 && f.WhenCanBorrow == kueue.TryNextFlavor
}

// Assignment is a Workload's flavor assignment.
type Assignment struct {
	Mode Mode
	// Borrow is the borrowing level: 0 within the queue's nominal quota.
	Borrow int
	// Usage is the quota the Workload would take, by flavor.
	Usage Amounts
	// need are the ids of the pairs that need preemption.
	need []int
	// Reasons say why it does not fit, as Kueue words them.
	Reasons []string
}

// assigned is a resource's flavor in an assignment, and its mode.
type assigned struct {
	res, flavor string
	id          int
	m           pmode
}

// psPlan is a pod set's requests as one queue covers them, worked out
// once: each request's resource group and the pair id on each of the
// group's flavors, and whether each flavor can hold the pod set.
type psPlan struct {
	q     *Queue
	reqs  map[string]int64
	keys  []string
	group []int   // per key: its group in q.Groups, -1 when none covers it
	ids   [][]int // per key: the pair's id on each flavor of its group
	fits  [][]int8
}

func (s *Sim) planFor(ps *PodSet, q *Queue) *psPlan {
	if ps.plan != nil && ps.plan.q == q {
		return ps.plan
	}
	p := &psPlan{q: q, reqs: ps.Requests, keys: ps.keys()}
	if q.groupOf(string(corev1.ResourcePods)) != nil {
		p.reqs = maps.Clone(ps.Requests)
		p.reqs[string(corev1.ResourcePods)] = int64(ps.Count)
		p.keys = slices.Sorted(maps.Keys(p.reqs))
	}
	for _, r := range p.keys {
		gi := slices.IndexFunc(q.Groups, func(g Group) bool { return g.Covered[r] })
		p.group = append(p.group, gi)
		if gi < 0 {
			p.ids = append(p.ids, nil)
			continue
		}
		p.ids = append(p.ids, q.Groups[gi].ids[r])
	}
	for _, g := range q.Groups {
		p.fits = append(p.fits, make([]int8, len(g.Flavors)))
	}
	ps.plan = p
	return p
}

// assign is Kueue's flavor assignment of a pending Workload in q, pod set
// by pod set, each resource group trying its flavors in order.
func (s *Sim) assign(w *Workload, q *Queue) Assignment {
	a := Assignment{Mode: Fit}
	podSets := w.podSets()
	if len(podSets) == 0 {
		a.Mode = NoFit
		return a
	}
	got := s.got[:0]
	defer func() { s.got = got }()
	for i := range podSets {
		ps := &podSets[i]
		p := s.planFor(ps, q)
		got = got[:0]
		for k, res := range p.keys {
			if slices.ContainsFunc(got, func(g assigned) bool { return g.res == res }) {
				continue
			}
			if p.reqs[res] == 0 && p.group[k] < 0 {
				continue
			}
			var borrow int
			var ok bool
			got, borrow, ok = s.findFlavor(w, q, ps, p, k, a.Usage, got, &a.Reasons)
			if !ok {
				a.Mode = NoFit
				return a
			}
			a.Borrow = max(a.Borrow, borrow)
		}
		for _, g := range got {
			if v := p.reqs[g.res]; v != 0 {
				// Zero requests take no quota (TotalRequestsFor).
				a.Usage = a.Usage.add(FR{Flavor: g.flavor, Resource: g.res}, g.id, v)
			}
			m := g.m.mode()
			if m < a.Mode {
				a.Mode = m
			}
			if m == Preempt && !slices.Contains(a.need, g.id) {
				a.need = append(a.need, g.id)
			}
		}
	}
	return a
}

// findFlavor is findFlavorForPodSets for one pod set and the resource
// group of its request k: it appends to got the flavor of each of the
// group's resources with its mode, and returns the borrowing level; false
// when no flavor fits. Why flavors did not fit goes to reasons when the
// Sim explains.
func (s *Sim) findFlavor(w *Workload, q *Queue, ps *PodSet, p *psPlan, k int, used Amounts, got []assigned, reasons *[]string) ([]assigned, int, bool) {
	gi := p.group[k]
	if gi < 0 {
		s.explainf(reasons, "resource %s unavailable in ClusterQueue", p.keys[k])
		return got, 0, false
	}
	g := &q.Groups[gi]
	base := len(got)
	chosen, try := s.chosen[:0], s.try[:0]
	defer func() { s.chosen, s.try = chosen, try }()
	bestMode, bestBorrow := worst(), 0
	for f, fname := range g.Flavors {
		if p.fits[gi][f] == 0 {
			p.fits[gi][f] = 1
			if s.flavorMismatch(fname, ps, g) != "" {
				p.fits[gi][f] = 2
			}
		}
		if p.fits[gi][f] == 2 {
			if s.explain {
				s.explainf(reasons, "%s", s.flavorMismatch(fname, ps, g))
			}
			continue
		}
		try = try[:0]
		rep := best()
		maxBorrow := 0
		for j, r := range p.keys {
			if p.group[j] != gi {
				continue
			}
			id := p.ids[j][f]
			m, borrow := s.fitsQuota(w, q, FR{Flavor: fname, Resource: r}, id, used.getID(id), p.reqs[r], reasons)
			maxBorrow = max(maxBorrow, borrow)
			gm := granular{m, borrow}
			if preferred(rep, gm, q.Fungibility) {
				rep = gm
			}
			if rep.p == pNoFit {
				break
			}
			try = append(try, assigned{res: r, flavor: fname, id: id, m: m})
		}
		if !tryNext(rep, q.Fungibility) {
			chosen, bestMode, bestBorrow = append(chosen[:0], try...), rep, maxBorrow
			break
		}
		if preferred(rep, bestMode, q.Fungibility) {
			chosen, bestMode, bestBorrow = append(chosen[:0], try...), rep, maxBorrow
		}
	}
	if bestMode.p == pNoFit {
		return got[:base], 0, false
	}
	return append(got, chosen...), bestBorrow, true
}

// explainf adds a reason when the Sim explains (Nominate); the scheduling
// loop does not pay for words it never prints.
func (s *Sim) explainf(reasons *[]string, format string, args ...any) {
	if s.explain && reasons != nil {
		*reasons = append(*reasons, fmt.Sprintf(format, args...))
	}
}

// flavorMismatch is checkFlavorForPodSets: why the flavor cannot hold the
// pod set (a missing flavor, an untolerated taint, node affinity), or "".
func (s *Sim) flavorMismatch(fname string, ps *PodSet, g *Group) string {
	rf := s.flavors[fname]
	if rf == nil {
		return fmt.Sprintf("flavor %s not found", fname)
	}
	if ps.Flavor != "" && ps.Flavor != fname {
		return fmt.Sprintf("flavor %s doesn't match node affinity", fname)
	}
	if ps.Spec == nil {
		return ""
	}
	tolerations := append(slices.Clone(ps.Spec.Tolerations), rf.Spec.Tolerations...)
	if taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), rf.Spec.NodeTaints, tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, true); untolerated {
		return fmt.Sprintf("untolerated taint %s in flavor %s", taint.ToString(), fname)
	}
	if ok, err := selectorOf(ps.Spec, g.LabelKeys).Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: rf.Spec.NodeLabels}}); !ok || err != nil {
		return fmt.Sprintf("flavor %s doesn't match node affinity", fname)
	}
	return ""
}

// selectorOf is flavorSelector: the pod's node selector and required node
// affinity, limited to the label keys of the group's flavors.
func selectorOf(spec *corev1.PodSpec, keys map[string]bool) nodeaffinity.RequiredNodeAffinity {
	var c corev1.PodSpec
	if len(spec.NodeSelector) != 0 {
		c.NodeSelector = map[string]string{}
		for k, v := range spec.NodeSelector {
			if keys[k] {
				c.NodeSelector[k] = v
			}
		}
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var terms []corev1.NodeSelectorTerm
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var exps []corev1.NodeSelectorRequirement
			for _, e := range t.MatchExpressions {
				if keys[e.Key] {
					exps = append(exps, e)
				}
			}
			if len(exps) == 0 {
				terms = nil
				break
			}
			terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: exps})
		}
		if len(terms) != 0 {
			c.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
		}
	}
	return nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: c})
}

// fitsQuota is fitsResourceQuota: whether val more of fr fits q now, by
// preempting, or not at all, and the borrowing level.
func (s *Sim) fitsQuota(w *Workload, q *Queue, fr FR, id int, assumed, request int64, reasons *[]string) (pmode, int) {
	available := max(0, q.available(id))
	maxCapacity := q.potentialAvailable(id)
	val := assumed + request
	if val > maxCapacity {
		s.explainf(reasons, "insufficient quota for %s in flavor %s, previously considered podsets requests (%d) + current podset request (%d) > maximum capacity (%d)",
			fr.Resource, fr.Flavor, assumed, request, maxCapacity)
		return pNoFit, 0
	}
	borrow, mayReclaim := q.lowestFit(id, val)
	if val <= available {
		return pFit, borrow
	}
	s.explainf(reasons, "insufficient unused quota for %s in flavor %s, %d more needed", fr.Resource, fr.Flavor, val-available)
	if val <= q.nominal(id) || mayReclaim || (q.Preemption.BorrowWithinCohort != "" && q.Preemption.BorrowWithinCohort != kueue.BorrowWithinCohortPolicyNever) {
		return s.oracle(w, q, fr, id, val)
	}
	return pNoFit, borrow
}

// oracle is PreemptionOracle.SimulatePreemption: whether preempting could
// make room for val of fr, and the borrowing level after it.
func (s *Sim) oracle(w *Workload, q *Queue, fr FR, id int, val int64) (pmode, int) {
	if !q.canPreempt() {
		// No candidate at all: the search would find none.
		borrow, _ := q.lowestFit(id, val)
		return pNoCandidates, borrow
	}
	p := &preemption{s: s, preemptor: w, cq: q, frsNeed: []int{id}, requests: Amounts{{FR: fr, V: val, id: id}}}
	targets := p.targets()
	if len(targets) == 0 {
		borrow, _ := q.lowestFit(id, val)
		return pNoCandidates, borrow
	}
	for _, t := range targets {
		s.remove(t.W)
	}
	borrow, _ := q.lowestFit(id, val)
	for _, t := range targets {
		s.restore(t.W)
	}
	for _, t := range targets {
		if t.W.Queue == q.Name {
			return pPreempt, borrow
		}
	}
	return pReclaim, borrow
}

func mapsClone[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
