package kueuesim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// FR is one resource on one ResourceFlavor, as Kueue counts quota.
type FR struct {
	Flavor   string
	Resource string
}

// String is "resource@flavor".
func (f FR) String() string { return f.Resource + "@" + f.Flavor }

// Compare orders by resource, then flavor.
func (f FR) Compare(o FR) int {
	return cmp.Or(cmp.Compare(f.Resource, o.Resource), cmp.Compare(f.Flavor, o.Flavor))
}

// Value is a quantity in Kueue's units: milli-units for cpu, whole units
// (rounded up) for every other resource (resources.ResourceValue).
func Value(name string, q resource.Quantity) int64 {
	if name == string(corev1.ResourceCPU) {
		return q.MilliValue()
	}
	return q.Value()
}

// Quota is one ResourceQuota of a ClusterQueue or Cohort, in Kueue's
// units.
type Quota struct {
	Nominal        int64
	BorrowingLimit *int64
	LendingLimit   *int64
}

// node is Kueue's resourceNode: the quotas of a ClusterQueue or Cohort,
// its SubtreeQuota (its own nominal and what its children lend it), and
// the usage counted against it (a ClusterQueue's own; a Cohort's, what its
// children use beyond their local quota).
type node struct {
	parent  *Cohort
	quotas  map[FR]Quota
	subtree map[FR]int64
	usage   map[FR]int64
}

func newNode() node {
	return node{quotas: map[FR]Quota{}, subtree: map[FR]int64{}, usage: map[FR]int64{}}
}

// localQuota is the part of the subtree's quota that lending limits keep
// from the parent.
func (n *node) localQuota(fr FR) int64 {
	if ll := n.quotas[fr].LendingLimit; ll != nil {
		return max(0, n.subtree[fr]-*ll)
	}
	return 0
}

func (n *node) localAvailable(fr FR) int64 {
	return max(0, n.localQuota(fr)-n.usage[fr])
}

// available is what remains for the node, through its borrowing limit and
// its ancestors; negative when the node holds more than it may (Kueue's
// available).
func (n *node) available(fr FR) int64 {
	if n.parent == nil {
		return n.subtree[fr] - n.usage[fr]
	}
	parentAvailable := n.parent.available(fr)
	if bl := n.quotas[fr].BorrowingLimit; bl != nil {
		stored := n.subtree[fr] - n.localQuota(fr)
		used := max(0, n.usage[fr]-n.localQuota(fr))
		parentAvailable = min(stored-used+*bl, parentAvailable)
	}
	return n.localAvailable(fr) + parentAvailable
}

// potentialAvailable is the most the node could hold with no usage at all
// (Kueue's potentialAvailable): the largest Workload it could admit.
func (n *node) potentialAvailable(fr FR) int64 {
	if n.parent == nil {
		return n.subtree[fr]
	}
	avail := n.localQuota(fr) + n.parent.potentialAvailable(fr)
	if bl := n.quotas[fr].BorrowingLimit; bl != nil {
		avail = min(n.subtree[fr]+*bl, avail)
	}
	return avail
}

func (n *node) addUsage(fr FR, v int64) {
	local := n.localAvailable(fr)
	n.usage[fr] += v
	if n.parent != nil && v > local {
		n.parent.addUsage(fr, v-local)
	}
}

func (n *node) removeUsage(fr FR, v int64) {
	stored := n.usage[fr] - n.localQuota(fr)
	n.usage[fr] -= v
	if stored <= 0 || n.parent == nil {
		return
	}
	n.parent.removeUsage(fr, min(v, stored))
}

// withinNominal: the node uses no more than its subtree's quota of any of
// frs (Kueue's IsWithinNominalInResources).
func (n *node) withinNominal(frs map[FR]bool) bool {
	for fr := range frs {
		if n.usage[fr] > n.subtree[fr] {
			return false
		}
	}
	return true
}

// fitsInQuota is Kueue's QuantitiesFitInQuota: whether requests fit the
// node's subtree quota, and what of them its local quota does not hold.
func (n *node) fitsInQuota(requests map[FR]int64) (bool, map[FR]int64) {
	fits := true
	remaining := make(map[FR]int64, len(requests))
	for fr, v := range requests {
		if n.usage[fr]+v > n.subtree[fr] {
			fits = false
		}
		remaining[fr] = max(0, v-n.localAvailable(fr))
	}
	return fits, remaining
}

// Cohort is a Kueue Cohort, explicit or implied by a cohortName.
type Cohort struct {
	node
	Name string
	// cohorts and queues are the children; queues holds the active
	// ClusterQueues only, as Kueue's snapshot does (an inactive one still
	// lends its quota).
	cohorts []*Cohort
	queues  []*Queue
}

func (c *Cohort) root() *Cohort {
	for c.parent != nil {
		c = c.parent
	}
	return c
}

func (c *Cohort) borrowingWith(fr FR, v int64) bool {
	return c.usage[fr]+v > c.subtree[fr]
}

// height is the distance to the furthest leaf (Kueue's getNodeHeight).
func (c *Cohort) height() int {
	h := min(len(c.cohorts)+len(c.queues), 1)
	for _, ch := range c.cohorts {
		h = max(h, ch.height()+1)
	}
	return h
}

// Preemption is a ClusterQueue's preemption policy.
type Preemption struct {
	WithinClusterQueue  kueue.PreemptionPolicy
	ReclaimWithinCohort kueue.PreemptionPolicy
	// BorrowWithinCohort is Never unless set; MaxPriorityThreshold
	// applies to LowerPriority.
	BorrowWithinCohort   kueue.BorrowWithinCohortPolicy
	MaxPriorityThreshold *int32
}

// Group is one resource group of a ClusterQueue.
type Group struct {
	Covered   map[string]bool
	Flavors   []string
	LabelKeys map[string]bool
}

// Queue is a ClusterQueue.
type Queue struct {
	node
	Name        string
	Preemption  Preemption
	Groups      []Group
	Fungibility kueue.FlavorFungibility
	StrictFIFO  bool
	// Inactive says why Kueue does not admit into the queue (a missing
	// flavor, a stop policy, a Cohort in a cycle); "" when active.
	Inactive string
	Selector labels.Selector

	admitted map[string]*Workload
	pending  []*Workload // in queue order
	// sticky is the Workload that issued preemptions and stays the head
	// until admitted (Kueue's stickyWorkload).
	sticky *Workload
}

func (q *Queue) nominal(fr FR) int64 { return q.quotas[fr].Nominal }

func (q *Queue) borrowingWith(fr FR, v int64) bool {
	return q.usage[fr]+v > q.quotas[fr].Nominal
}

func (q *Queue) borrowing(fr FR) bool { return q.borrowingWith(fr, 0) }

func (q *Queue) groupOf(res string) *Group {
	for i := range q.Groups {
		if q.Groups[i].Covered[res] {
			return &q.Groups[i]
		}
	}
	return nil
}

// Objects are the Kueue objects that decide quota.
type Objects struct {
	Cohorts       []kueue.Cohort
	ClusterQueues []kueue.ClusterQueue
	Flavors       []kueue.ResourceFlavor
}

// Sim is Kueue's view of the cluster, which simulations change.
type Sim struct {
	cohorts map[string]*Cohort
	queues  map[string]*Queue
	flavors map[string]*kueue.ResourceFlavor
	// now stands for the current time where Kueue reads the clock: the
	// reservation time of a Workload without one.
	now time.Time
	// Unplaced are Workloads whose ClusterQueue does not exist (Kueue
	// does not count them), by key.
	Unplaced []string
	claims   int
}

// New builds Kueue's view of objs with the admitted and pending
// Workloads. now stands for Kueue's clock.
func New(objs Objects, workloads []*Workload, now time.Time) *Sim {
	s := &Sim{cohorts: map[string]*Cohort{}, queues: map[string]*Queue{}, flavors: map[string]*kueue.ResourceFlavor{}, now: now}
	for i := range objs.Flavors {
		s.flavors[objs.Flavors[i].Name] = &objs.Flavors[i]
	}
	cohort := func(name string) *Cohort {
		c := s.cohorts[name]
		if c == nil {
			c = &Cohort{node: newNode(), Name: name}
			s.cohorts[name] = c
		}
		return c
	}
	parents := map[string]string{}
	for i := range objs.Cohorts {
		co := &objs.Cohorts[i]
		c := cohort(co.Name)
		c.quotas = quotasOf(co.Spec.ResourceGroups)
		if p := string(co.Spec.ParentName); p != "" {
			parents[co.Name] = p
			cohort(p)
		}
	}
	// A Cohort in a cycle of parents is left out, with its subtree
	// (Kueue's snapshot skips it and its ClusterQueues are inactive).
	cyclic := map[string]bool{}
	for name := range s.cohorts {
		seen := map[string]bool{}
		for at := name; at != ""; at = parents[at] {
			if seen[at] {
				cyclic[name] = true
				break
			}
			seen[at] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.cohorts)) {
		if p, ok := parents[name]; ok && !cyclic[name] {
			c := s.cohorts[name]
			c.parent = s.cohorts[p]
			c.parent.cohorts = append(c.parent.cohorts, c)
		}
	}
	for i := range objs.ClusterQueues {
		cq := &objs.ClusterQueues[i]
		q := s.queueOf(cq)
		s.queues[q.Name] = q
		if name := string(cq.Spec.CohortName); name != "" {
			c := cohort(name)
			if cyclic[name] {
				q.Inactive = fmt.Sprintf("its Cohort %s is in a cycle of parents", name)
				continue
			}
			q.parent = c
			if q.Inactive == "" {
				c.queues = append(c.queues, q)
			}
		}
	}
	for _, c := range s.cohorts {
		slices.SortFunc(c.queues, func(a, b *Queue) int { return cmp.Compare(a.Name, b.Name) })
		slices.SortFunc(c.cohorts, func(a, b *Cohort) int { return cmp.Compare(a.Name, b.Name) })
	}
	// Quota through the tree: each root accumulates from its leaves up.
	for _, c := range s.cohorts {
		if c.parent == nil && !cyclic[c.Name] {
			s.accumulate(c)
		}
	}
	for _, q := range s.queues {
		if q.parent == nil {
			q.subtree = nominals(q.quotas)
		}
	}
	for _, w := range workloads {
		q := s.queues[w.Queue]
		if q == nil {
			s.Unplaced = append(s.Unplaced, w.Key())
			continue
		}
		if w.Admitted {
			s.admit(q, w)
		} else {
			q.pending = append(q.pending, w)
		}
	}
	for _, q := range s.queues {
		q.sortPending()
	}
	slices.Sort(s.Unplaced)
	return s
}

// accumulate computes a Cohort's SubtreeQuota from its children
// (updateCohortResourceNode), inactive ClusterQueues included.
func (s *Sim) accumulate(c *Cohort) {
	c.subtree = nominals(c.quotas)
	for _, ch := range c.cohorts {
		s.accumulate(ch)
		for fr, v := range ch.subtree {
			c.subtree[fr] += v - ch.localQuota(fr)
		}
	}
	for _, q := range s.queues {
		if q.parent != c {
			continue
		}
		q.subtree = nominals(q.quotas)
		for fr, v := range q.subtree {
			c.subtree[fr] += v - q.localQuota(fr)
		}
	}
}

func nominals(quotas map[FR]Quota) map[FR]int64 {
	out := make(map[FR]int64, len(quotas))
	for fr, q := range quotas {
		out[fr] = q.Nominal
	}
	return out
}

func quotasOf(groups []kueue.ResourceGroup) map[FR]Quota {
	out := map[FR]Quota{}
	for _, rg := range groups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				name := string(r.Name)
				q := Quota{Nominal: Value(name, r.NominalQuota)}
				if r.BorrowingLimit != nil {
					v := Value(name, *r.BorrowingLimit)
					q.BorrowingLimit = &v
				}
				if r.LendingLimit != nil {
					v := Value(name, *r.LendingLimit)
					q.LendingLimit = &v
				}
				out[FR{Flavor: string(f.Name), Resource: name}] = q
			}
		}
	}
	return out
}

func (s *Sim) queueOf(cq *kueue.ClusterQueue) *Queue {
	q := &Queue{node: newNode(), Name: cq.Name, admitted: map[string]*Workload{}}
	q.quotas = quotasOf(cq.Spec.ResourceGroups)
	for _, rg := range cq.Spec.ResourceGroups {
		g := Group{Covered: map[string]bool{}, LabelKeys: map[string]bool{}}
		for _, r := range rg.CoveredResources {
			g.Covered[string(r)] = true
		}
		for _, f := range rg.Flavors {
			g.Flavors = append(g.Flavors, string(f.Name))
			if rf := s.flavors[string(f.Name)]; rf != nil {
				for k := range rf.Spec.NodeLabels {
					g.LabelKeys[k] = true
				}
			} else if q.Inactive == "" {
				q.Inactive = fmt.Sprintf("its ResourceFlavor %s does not exist", f.Name)
			}
		}
		q.Groups = append(q.Groups, g)
	}
	p := cq.Spec.Preemption
	q.Preemption = Preemption{WithinClusterQueue: kueue.PreemptionPolicyNever, ReclaimWithinCohort: kueue.PreemptionPolicyNever, BorrowWithinCohort: kueue.BorrowWithinCohortPolicyNever}
	if p != nil {
		q.Preemption.WithinClusterQueue = cmp.Or(p.WithinClusterQueue, kueue.PreemptionPolicyNever)
		q.Preemption.ReclaimWithinCohort = cmp.Or(p.ReclaimWithinCohort, kueue.PreemptionPolicyNever)
		if b := p.BorrowWithinCohort; b != nil {
			q.Preemption.BorrowWithinCohort = cmp.Or(b.Policy, kueue.BorrowWithinCohortPolicyNever)
			q.Preemption.MaxPriorityThreshold = b.MaxPriorityThreshold
		}
	}
	q.Fungibility = kueue.FlavorFungibility{WhenCanBorrow: kueue.MayStopSearch, WhenCanPreempt: kueue.TryNextFlavor}
	if f := cq.Spec.FlavorFungibility; f != nil {
		q.Fungibility.WhenCanBorrow = cmp.Or(f.WhenCanBorrow, kueue.MayStopSearch)
		q.Fungibility.WhenCanPreempt = cmp.Or(f.WhenCanPreempt, kueue.TryNextFlavor)
		q.Fungibility.Preference = f.Preference
	}
	q.StrictFIFO = cq.Spec.QueueingStrategy == kueue.StrictFIFO
	if sp := cq.Spec.StopPolicy; sp != nil && *sp != kueue.None && q.Inactive == "" {
		q.Inactive = fmt.Sprintf("its stopPolicy is %s", *sp)
	}
	if cq.DeletionTimestamp != nil && q.Inactive == "" {
		q.Inactive = "it is being deleted"
	}
	q.Selector = labels.Nothing()
	if cq.Spec.NamespaceSelector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(cq.Spec.NamespaceSelector); err == nil {
			q.Selector = sel
		}
	}
	return q
}

// admit counts w as admitted by q.
func (s *Sim) admit(q *Queue, w *Workload) {
	w.Admitted, w.Queue = true, q.Name
	q.admitted[w.Key()] = w
	for fr, v := range w.Usage {
		q.addUsage(fr, v)
	}
}

// remove takes an admitted w out of its queue's usage (a simulated
// removal, or an eviction).
func (s *Sim) remove(w *Workload) {
	q := s.queues[w.Queue]
	delete(q.admitted, w.Key())
	for fr, v := range w.Usage {
		q.removeUsage(fr, v)
	}
}

// restore puts back a Workload that remove took out.
func (s *Sim) restore(w *Workload) { s.admit(s.queues[w.Queue], w) }

// Queue is the ClusterQueue named name, or nil.
func (s *Sim) Queue(name string) *Queue { return s.queues[name] }

// Admitted are the queue's admitted Workloads, by key.
func (q *Queue) Admitted() []*Workload {
	return slices.SortedFunc(maps.Values(q.admitted), func(a, b *Workload) int { return cmp.Compare(a.Key(), b.Key()) })
}

// Usage is what the queue's admitted Workloads use of fr.
func (q *Queue) Usage(fr FR) int64 { return q.usage[fr] }

// Quota is the queue's quota of fr.
func (q *Queue) Quota(fr FR) Quota { return q.quotas[fr] }

// Cohort is the name of the queue's Cohort, "" when it has none.
func (q *Queue) Cohort() string {
	if q.parent == nil {
		return ""
	}
	return q.parent.Name
}

// Available is what the queue can still admit of fr without preempting
// (never negative), and MaxCapacity the largest Workload it could admit
// with the rest of the tree idle (Kueue's PotentialAvailable).
func (q *Queue) Available(fr FR) int64   { return max(0, q.available(fr)) }
func (q *Queue) MaxCapacity(fr FR) int64 { return q.potentialAvailable(fr) }
