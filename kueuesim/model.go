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
// children use beyond their local quota). Each is indexed by the Sim's id
// of a pair (Sim.id): the simulation looks them up millions of times.
type node struct {
	parent  *Cohort
	quota   []Quota
	subtree []int64
	usage   []int64
}

func (n *node) grow(size int) {
	for len(n.quota) < size {
		n.quota = append(n.quota, Quota{})
		n.subtree = append(n.subtree, 0)
		n.usage = append(n.usage, 0)
	}
}

// localQuota is the part of the subtree's quota that lending limits keep
// from the parent.
func (n *node) localQuota(i int) int64 {
	if ll := n.quota[i].LendingLimit; ll != nil {
		return max(0, n.subtree[i]-*ll)
	}
	return 0
}

func (n *node) localAvailable(i int) int64 {
	return max(0, n.localQuota(i)-n.usage[i])
}

// available is what remains for the node, through its borrowing limit and
// its ancestors; negative when the node holds more than it may (Kueue's
// available).
func (n *node) available(i int) int64 {
	if n.parent == nil {
		return n.subtree[i] - n.usage[i]
	}
	parentAvailable := n.parent.available(i)
	if bl := n.quota[i].BorrowingLimit; bl != nil {
		stored := n.subtree[i] - n.localQuota(i)
		used := max(0, n.usage[i]-n.localQuota(i))
		parentAvailable = min(stored-used+*bl, parentAvailable)
	}
	return n.localAvailable(i) + parentAvailable
}

// potentialAvailable is the most the node could hold with no usage at all
// (Kueue's potentialAvailable): the largest Workload it could admit.
func (n *node) potentialAvailable(i int) int64 {
	if n.parent == nil {
		return n.subtree[i]
	}
	avail := n.localQuota(i) + n.parent.potentialAvailable(i)
	if bl := n.quota[i].BorrowingLimit; bl != nil {
		avail = min(n.subtree[i]+*bl, avail)
	}
	return avail
}

func (n *node) addUsage(i int, v int64) {
	local := n.localAvailable(i)
	n.usage[i] += v
	if n.parent != nil && v > local {
		n.parent.addUsage(i, v-local)
	}
}

// delta is a change of one node's usage, to undo it exactly.
type delta struct {
	n *node
	i int
	v int64
}

// addUsageLogged is addUsage recording what it changed at each level, so
// that a change within a scheduling cycle (Kueue throws its snapshot
// away) can be undone exactly, negative reservations included.
func (n *node) addUsageLogged(i int, v int64, log *[]delta) {
	local := n.localAvailable(i)
	n.usage[i] += v
	*log = append(*log, delta{n, i, v})
	if n.parent != nil && v > local {
		n.parent.addUsageLogged(i, v-local, log)
	}
}

func (n *node) removeUsage(i int, v int64) {
	stored := n.usage[i] - n.localQuota(i)
	n.usage[i] -= v
	if stored <= 0 || n.parent == nil {
		return
	}
	n.parent.removeUsage(i, min(v, stored))
}

// withinNominal: the node uses no more than its subtree's quota of any of
// ids (Kueue's IsWithinNominalInResources).
func (n *node) withinNominal(ids []int) bool {
	for _, i := range ids {
		if n.usage[i] > n.subtree[i] {
			return false
		}
	}
	return true
}

// fitsInQuota is Kueue's QuantitiesFitInQuota: whether requests fit the
// node's subtree quota, and what of them its local quota does not hold.
func (n *node) fitsInQuota(requests Amounts) (bool, Amounts) {
	fits := true
	remaining := make(Amounts, len(requests))
	for k, r := range requests {
		if n.usage[r.id]+r.V > n.subtree[r.id] {
			fits = false
		}
		remaining[k] = Amount{FR: r.FR, V: max(0, r.V-n.localAvailable(r.id)), id: r.id}
	}
	return fits, remaining
}

// Amount is an amount of one resource on one flavor.
type Amount struct {
	FR
	V  int64
	id int
}

// Amounts are amounts of a few pairs, each once: a Workload asks for one
// or two, where a map would cost more than it saves.
type Amounts []Amount

// Get is the amount of fr, 0 when absent.
func (a Amounts) Get(fr FR) int64 {
	for _, x := range a {
		if x.FR == fr {
			return x.V
		}
	}
	return 0
}

func (a Amounts) getID(id int) int64 {
	for _, x := range a {
		if x.id == id {
			return x.V
		}
	}
	return 0
}

func (a Amounts) add(fr FR, id int, v int64) Amounts {
	for k := range a {
		if a[k].id == id {
			a[k].V += v
			return a
		}
	}
	return append(a, Amount{FR: fr, V: v, id: id})
}

// Map is the amounts by pair.
func (a Amounts) Map() map[FR]int64 {
	out := make(map[FR]int64, len(a))
	for _, x := range a {
		out[x.FR] += x.V
	}
	return out
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
	h       int
}

func (c *Cohort) root() *Cohort {
	for c.parent != nil {
		c = c.parent
	}
	return c
}

func (c *Cohort) borrowingWith(i int, v int64) bool {
	return c.usage[i]+v > c.subtree[i]
}

// height is the distance to the furthest leaf (Kueue's getNodeHeight),
// computed once: the tree does not change.
func (c *Cohort) height() int {
	if c.h < 0 {
		c.h = min(len(c.cohorts)+len(c.queues), 1)
		for _, ch := range c.cohorts {
			c.h = max(c.h, ch.height()+1)
		}
	}
	return c.h
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
	// ids are, by resource, the id of each flavor's pair with it.
	ids map[string][]int
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
	sim      *Sim

	admitted map[string]*Workload
	pending  []*Workload // in queue order
	// sticky is the Workload that issued preemptions and stays the head
	// until admitted (Kueue's stickyWorkload).
	sticky *Workload
	// selects remembers which namespaces the selector matches.
	selects map[string]bool
}

func (q *Queue) nominal(i int) int64 { return q.quota[i].Nominal }

// canPreempt: the queue's policies let it preempt some Workload: in
// itself, or, in a Cohort, one that borrows. A queue that cannot finds no
// candidate, whatever the tree holds.
func (q *Queue) canPreempt() bool {
	return q.Preemption.WithinClusterQueue != kueue.PreemptionPolicyNever ||
		(q.parent != nil && q.Preemption.ReclaimWithinCohort != kueue.PreemptionPolicyNever)
}

func (q *Queue) borrowingWith(i int, v int64) bool {
	return q.usage[i]+v > q.quota[i].Nominal
}

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
	// frs are the pairs by id, ids their ids; nodes are every Cohort's
	// and ClusterQueue's, grown when a pair is first seen.
	frs     []FR
	ids     map[FR]int
	nodes   []*node
	cohorts map[string]*Cohort
	queues  map[string]*Queue
	flavors map[string]*kueue.ResourceFlavor
	// now stands for the current time where Kueue reads the clock: the
	// reservation time of a Workload without one.
	now time.Time
	// sorted are the queues by name.
	sorted []*Queue
	// Unplaced are Workloads whose ClusterQueue does not exist (Kueue
	// does not count them), by key.
	Unplaced []string
	claims   int
	// explain: flavor assignment says why, in Kueue's words.
	explain bool
	// got, chosen and try are assign's buffers, buffers Run's.
	got, chosen, try []assigned
	buffers          buffers
}

// New builds Kueue's view of objs with the admitted and pending
// Workloads. now stands for Kueue's clock.
func New(objs Objects, workloads []*Workload, now time.Time) *Sim {
	s := &Sim{cohorts: map[string]*Cohort{}, queues: map[string]*Queue{}, flavors: map[string]*kueue.ResourceFlavor{}, ids: map[FR]int{}, now: now}
	for i := range objs.Flavors {
		s.flavors[objs.Flavors[i].Name] = &objs.Flavors[i]
	}
	cohort := func(name string) *Cohort {
		c := s.cohorts[name]
		if c == nil {
			c = &Cohort{Name: name, h: -1}
			s.cohorts[name] = c
			s.nodes = append(s.nodes, &c.node)
			c.grow(len(s.frs))
		}
		return c
	}
	parents := map[string]string{}
	for i := range objs.Cohorts {
		co := &objs.Cohorts[i]
		c := cohort(co.Name)
		s.setQuotas(&c.node, quotasOf(co.Spec.ResourceGroups))
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
	// Every pair a Workload holds, so that the tree sums it.
	for _, w := range workloads {
		for _, fr := range slices.SortedFunc(maps.Keys(w.Usage), FR.Compare) {
			s.id(fr)
		}
	}
	// Quota through the tree: each root accumulates from its leaves up.
	for _, c := range s.cohorts {
		if c.parent == nil && !cyclic[c.Name] {
			s.accumulate(c)
		}
	}
	for _, q := range s.queues {
		if q.parent == nil {
			for i := range q.quota {
				q.subtree[i] = q.quota[i].Nominal
			}
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
	for _, name := range slices.Sorted(maps.Keys(s.queues)) {
		s.sorted = append(s.sorted, s.queues[name])
		s.queues[name].sortPending()
	}
	slices.Sort(s.Unplaced)
	return s
}

// id is the pair's id, given on first sight: every node grows a slot.
func (s *Sim) id(fr FR) int {
	if i, ok := s.ids[fr]; ok {
		return i
	}
	i := len(s.frs)
	s.frs = append(s.frs, fr)
	s.ids[fr] = i
	for _, n := range s.nodes {
		n.grow(len(s.frs))
	}
	return i
}

// lookup is the pair's id, or false when the Sim has never seen it.
func (s *Sim) lookup(fr FR) (int, bool) {
	i, ok := s.ids[fr]
	return i, ok
}

func (s *Sim) setQuotas(n *node, quotas map[FR]Quota) {
	for _, fr := range slices.SortedFunc(maps.Keys(quotas), FR.Compare) {
		n.quota[s.id(fr)] = quotas[fr]
	}
}

// accumulate computes a Cohort's SubtreeQuota from its children
// (updateCohortResourceNode), inactive ClusterQueues included.
func (s *Sim) accumulate(c *Cohort) {
	for i := range c.quota {
		c.subtree[i] = c.quota[i].Nominal
	}
	for _, ch := range c.cohorts {
		s.accumulate(ch)
		for i, v := range ch.subtree {
			c.subtree[i] += v - ch.localQuota(i)
		}
	}
	for _, q := range s.queues {
		if q.parent != c {
			continue
		}
		for i := range q.quota {
			q.subtree[i] = q.quota[i].Nominal
			c.subtree[i] += q.subtree[i] - q.localQuota(i)
		}
	}
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
	q := &Queue{Name: cq.Name, admitted: map[string]*Workload{}, sim: s}
	s.nodes = append(s.nodes, &q.node)
	q.grow(len(s.frs))
	s.setQuotas(&q.node, quotasOf(cq.Spec.ResourceGroups))
	for _, rg := range cq.Spec.ResourceGroups {
		g := Group{Covered: map[string]bool{}, LabelKeys: map[string]bool{}, ids: map[string][]int{}}
		for _, r := range rg.CoveredResources {
			g.Covered[string(r)] = true
		}
		for _, r := range rg.CoveredResources {
			for _, f := range rg.Flavors {
				g.ids[string(r)] = append(g.ids[string(r)], s.id(FR{Flavor: string(f.Name), Resource: string(r)}))
			}
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
	for _, u := range s.usageOf(w) {
		q.addUsage(u.id, u.V)
	}
}

// remove takes an admitted w out of its queue's usage (a simulated
// removal, or an eviction).
func (s *Sim) remove(w *Workload) {
	q := s.queues[w.Queue]
	delete(q.admitted, w.Key())
	for _, u := range s.usageOf(w) {
		q.removeUsage(u.id, u.V)
	}
}

// usageOf is w's usage by pair id, read once from its Usage.
func (s *Sim) usageOf(w *Workload) Amounts {
	if w.usage == nil && len(w.Usage) > 0 {
		for _, fr := range slices.SortedFunc(maps.Keys(w.Usage), FR.Compare) {
			w.usage = append(w.usage, Amount{FR: fr, V: w.Usage[fr], id: s.id(fr)})
		}
	}
	return w.usage
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
func (q *Queue) Usage(fr FR) int64 {
	if i, ok := q.sim.lookup(fr); ok {
		return q.usage[i]
	}
	return 0
}

// Quota is the queue's quota of fr.
func (q *Queue) Quota(fr FR) Quota {
	if i, ok := q.sim.lookup(fr); ok {
		return q.quota[i]
	}
	return Quota{}
}

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
func (q *Queue) Available(fr FR) int64   { return max(0, q.available(q.sim.id(fr))) }
func (q *Queue) MaxCapacity(fr FR) int64 { return q.potentialAvailable(q.sim.id(fr)) }
