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
	Usage map[FR]int64
	// NeedPreemption are the pairs that need preemption.
	NeedPreemption map[FR]bool
	// Reasons say why it does not fit, as Kueue words them.
	Reasons []string
}

// assign is Kueue's flavor assignment of a pending Workload in q, pod set
// by pod set, each resource group trying its flavors in order.
func (s *Sim) assign(w *Workload, q *Queue) Assignment {
	a := Assignment{Mode: Fit, Usage: map[FR]int64{}, NeedPreemption: map[FR]bool{}}
	if len(w.PodSets) == 0 {
		a.Mode = NoFit
		return a
	}
	for _, ps := range w.PodSets {
		reqs := ps.Requests
		if q.groupOf(string(corev1.ResourcePods)) != nil {
			reqs = maps.Clone(reqs)
			reqs[string(corev1.ResourcePods)] = int64(ps.Count)
		}
		assigned := map[string]string{}
		modes := map[string]pmode{}
		failed := false
		for _, res := range slices.Sorted(maps.Keys(reqs)) {
			if _, done := assigned[res]; done {
				continue
			}
			if reqs[res] == 0 && q.groupOf(res) == nil {
				continue
			}
			flavors, mode, borrow, reasons := s.findFlavor(w, q, &ps, reqs, res, a.Usage)
			a.Reasons = append(a.Reasons, reasons...)
			if len(flavors) == 0 {
				failed = true
				break
			}
			a.Borrow = max(a.Borrow, borrow)
			for r, f := range flavors {
				assigned[r] = f
				modes[r] = mode[r]
			}
		}
		if failed {
			a.Mode = NoFit
			return a
		}
		for r, f := range assigned {
			fr := FR{Flavor: f, Resource: r}
			if reqs[r] != 0 {
				// Zero requests take no quota (TotalRequestsFor).
				a.Usage[fr] += reqs[r]
			}
			m := modes[r].mode()
			if m < a.Mode {
				a.Mode = m
			}
			if m == Preempt {
				a.NeedPreemption[fr] = true
			}
		}
	}
	return a
}

// findFlavor is findFlavorForPodSets for one pod set and the resource
// group of res: the flavors for the group's resources, each one's mode,
// the borrowing level, and why flavors did not fit.
func (s *Sim) findFlavor(w *Workload, q *Queue, ps *PodSet, reqs map[string]int64, res string, used map[FR]int64) (map[string]string, map[string]pmode, int, []string) {
	g := q.groupOf(res)
	if g == nil {
		return nil, nil, 0, []string{fmt.Sprintf("resource %s unavailable in ClusterQueue", res)}
	}
	requests := map[string]int64{}
	for r, v := range reqs {
		if g.Covered[r] {
			requests[r] = v
		}
	}
	var reasons []string
	var bestFlavors map[string]string
	var bestModes map[string]pmode
	bestMode, bestBorrow := worst(), 0
	for _, fname := range g.Flavors {
		if why := s.flavorMismatch(fname, ps, g); why != "" {
			reasons = append(reasons, why)
			continue
		}
		flavors := map[string]string{}
		modes := map[string]pmode{}
		rep := best()
		maxBorrow := 0
		for _, r := range slices.Sorted(maps.Keys(requests)) {
			fr := FR{Flavor: fname, Resource: r}
			m, borrow, why := s.fitsQuota(w, q, fr, used[fr], requests[r])
			if why != "" {
				reasons = append(reasons, why)
			}
			maxBorrow = max(maxBorrow, borrow)
			gm := granular{m, borrow}
			if preferred(rep, gm, q.Fungibility) {
				rep = gm
			}
			if rep.p == pNoFit {
				break
			}
			flavors[r], modes[r] = fname, m
		}
		if !tryNext(rep, q.Fungibility) {
			bestFlavors, bestModes, bestMode, bestBorrow = flavors, modes, rep, maxBorrow
			break
		}
		if preferred(rep, bestMode, q.Fungibility) {
			bestFlavors, bestModes, bestMode, bestBorrow = flavors, modes, rep, maxBorrow
		}
	}
	if bestMode.p == pNoFit {
		return nil, nil, 0, reasons
	}
	return bestFlavors, bestModes, bestBorrow, reasons
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
func (s *Sim) fitsQuota(w *Workload, q *Queue, fr FR, assumed, request int64) (pmode, int, string) {
	available := max(0, q.available(fr))
	maxCapacity := q.potentialAvailable(fr)
	val := assumed + request
	if val > maxCapacity {
		return pNoFit, 0, fmt.Sprintf("insufficient quota for %s in flavor %s, previously considered podsets requests (%d) + current podset request (%d) > maximum capacity (%d)",
			fr.Resource, fr.Flavor, assumed, request, maxCapacity)
	}
	borrow, mayReclaim := q.lowestFit(fr, val)
	if val <= available {
		return pFit, borrow, ""
	}
	why := fmt.Sprintf("insufficient unused quota for %s in flavor %s, %d more needed", fr.Resource, fr.Flavor, val-available)
	if val <= q.nominal(fr) || mayReclaim || (q.Preemption.BorrowWithinCohort != "" && q.Preemption.BorrowWithinCohort != kueue.BorrowWithinCohortPolicyNever) {
		m, after := s.oracle(w, q, fr, val)
		return m, after, why
	}
	return pNoFit, borrow, why
}

// oracle is PreemptionOracle.SimulatePreemption: whether preempting could
// make room for val of fr, and the borrowing level after it.
func (s *Sim) oracle(w *Workload, q *Queue, fr FR, val int64) (pmode, int) {
	p := &preemption{s: s, preemptor: w, cq: q, frsNeed: map[FR]bool{fr: true}, requests: map[FR]int64{fr: val}}
	targets := p.targets()
	if len(targets) == 0 {
		borrow, _ := q.lowestFit(fr, val)
		return pNoCandidates, borrow
	}
	for _, t := range targets {
		s.remove(t.W)
	}
	borrow, _ := q.lowestFit(fr, val)
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
