package kueuesim

import (
	"cmp"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelpers "k8s.io/component-helpers/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Workload is what Kueue's scheduler reads of one Workload.
type Workload struct {
	Namespace, Name string
	UID             string
	// Queue is the ClusterQueue: the one that admitted it, or, pending,
	// the one its LocalQueue points to.
	Queue      string
	LocalQueue string
	Priority   int64
	// QueuedAt orders it in its queue (Kueue's queue order timestamp:
	// creation, or an eviction by a PodsReady timeout or admission
	// check); ReservedAt is when its quota was reserved (admitted ones).
	QueuedAt   time.Time
	ReservedAt time.Time
	// Evicted: the Workload holds quota but is being evicted.
	Evicted  bool
	Admitted bool
	// Usage is an admitted Workload's quota, by resource and flavor,
	// from its admission (a pair assigned with no request counts 0).
	Usage map[FR]int64
	// PodSets are its requests, which it asks for while pending and
	// again once evicted and requeued.
	PodSets []PodSet
	// Hypothetical marks a Workload that does not exist: a lender's
	// claim.
	Hypothetical bool
	// obj is the object read, whose pod sets PodSets reads when needed;
	// usage is Usage by pair id (Sim.usageOf), key its Key.
	obj   *kueue.Workload
	usage Amounts
	key   string
}

// podSets are the Workload's pod sets, read from its object the first
// time (PodRequests, as Kueue computes them, scaled by each count after
// reclaimable pods). The pod specs are the object's, never changed.
func (w *Workload) podSets() []PodSet {
	if w.PodSets != nil || w.obj == nil {
		return w.PodSets
	}
	obj := w.obj
	after := countsAfterReclaim(obj)
	for i := range obj.Spec.PodSets {
		ps := &obj.Spec.PodSets[i]
		count := after[ps.Name]
		reqs := resourcehelpers.PodRequests(&corev1.Pod{Spec: ps.Template.Spec}, resourcehelpers.PodResourcesOptions{})
		set := PodSet{Name: string(ps.Name), Count: count, Requests: make(map[string]int64, len(reqs)), Spec: &ps.Template.Spec}
		for name, q := range reqs {
			set.Requests[string(name)] = Value(string(name), q) * int64(count)
		}
		w.PodSets = append(w.PodSets, set)
	}
	return w.PodSets
}

// PodSet is one pod set of a pending Workload: its total requests in
// Kueue's units and what of its pods decides a flavor.
type PodSet struct {
	Name     string
	Count    int32
	Requests map[string]int64
	// Spec holds the node selector, affinity and tolerations; nil
	// matches every flavor.
	Spec *corev1.PodSpec
	// Flavor, for a hypothetical pod set, is the one flavor its pods
	// select.
	Flavor string
	// sorted are the names of Requests, sorted; plan is the pod set as
	// the queue of its last nomination covers it.
	sorted []string
	plan   *psPlan
}

func (ps *PodSet) keys() []string {
	if ps.sorted == nil || len(ps.sorted) != len(ps.Requests) {
		ps.sorted = slices.Sorted(maps.Keys(ps.Requests))
	}
	return ps.sorted
}

// Key is "namespace/name".
func (w *Workload) Key() string {
	if w.key == "" {
		w.key = w.Namespace + "/" + w.Name
	}
	return w.key
}

// UsageOf is what w uses of fr.
func (w *Workload) UsageOf(fr FR) int64 { return w.Usage[fr] }

// Requests is a pending Workload's total requests, by resource.
func (w *Workload) Requests() map[string]int64 {
	out := map[string]int64{}
	for _, ps := range w.podSets() {
		for r, v := range ps.Requests {
			out[r] += v
		}
	}
	return out
}

func (w *Workload) clone() *Workload {
	c := *w
	c.Usage, c.usage = maps.Clone(w.Usage), nil
	return &c
}

// State is what Kueue makes of a Workload object.
type State int

const (
	// Ignored: finished, deactivated, or reserving no quota and not
	// waiting for it.
	Ignored State = iota
	// Holding: it holds quota (an active quota reservation).
	Holding
	// Waiting: it waits in a LocalQueue for quota.
	Waiting
)

// FromAPI reads a Workload object as Kueue's scheduler does. A Workload
// holding an active quota reservation is Holding with the usage of its
// admission; one waiting for quota is Waiting, its requests read from
// its pod sets (DRA claims of a pending Workload are not read: Kueue maps
// them with its own configuration).
func FromAPI(obj *kueue.Workload) (*Workload, State) {
	w := &Workload{
		Namespace: obj.Namespace, Name: obj.Name, UID: string(obj.UID),
		LocalQueue: string(obj.Spec.QueueName),
		Priority:   int64(ptrOr(obj.Spec.Priority, 0)),
		QueuedAt:   queueOrderTime(obj),
	}
	finished := meta.IsStatusConditionTrue(obj.Status.Conditions, kueue.WorkloadFinished)
	active := obj.Spec.Active == nil || *obj.Spec.Active
	reserved := meta.FindStatusCondition(obj.Status.Conditions, kueue.WorkloadQuotaReserved)
	hasReservation := reserved != nil && reserved.Status == metav1.ConditionTrue
	if finished || !active || len(obj.Spec.PodSets) == 0 {
		return w, Ignored
	}
	// Its requests, read when first needed: what it asks for while
	// pending, and again once evicted and requeued.
	w.obj = obj
	switch {
	case hasReservation && obj.Status.Admission != nil:
		w.Admitted = true
		w.Queue = string(obj.Status.Admission.ClusterQueue)
		w.ReservedAt = reserved.LastTransitionTime.Time
		w.Evicted = meta.IsStatusConditionTrue(obj.Status.Conditions, kueue.WorkloadEvicted)
		w.Usage = admittedUsage(obj)
		return w, Holding
	case hasReservation || hasAdmissionGate(obj):
		return w, Ignored
	}
	return w, Waiting
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func hasAdmissionGate(obj *kueue.Workload) bool {
	_, ok := obj.Annotations["kueue.x-k8s.io/admission-gated-by"]
	return ok
}

// queueOrderTime is Kueue's GetQueueOrderTimestamp with its default
// configuration (requeuing by eviction time, PrioritySortingWithinCohort
// on).
func queueOrderTime(obj *kueue.Workload) time.Time {
	if c := meta.FindStatusCondition(obj.Status.Conditions, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue &&
		(c.Reason == kueue.WorkloadEvictedByPodsReadyTimeout || c.Reason == kueue.WorkloadEvictedByAdmissionCheck) {
		return c.LastTransitionTime.Time
	}
	return obj.CreationTimestamp.Time
}

func countsAfterReclaim(obj *kueue.Workload) map[kueue.PodSetReference]int32 {
	out := map[kueue.PodSetReference]int32{}
	for _, ps := range obj.Spec.PodSets {
		out[ps.Name] = ps.Count
	}
	for _, rp := range obj.Status.ReclaimablePods {
		if c, ok := out[rp.Name]; ok {
			out[rp.Name] = max(0, c-rp.Count)
		}
	}
	return out
}

// admittedUsage is the quota an admission holds (Kueue's
// totalRequestsFromAdmission): each pod set's resourceUsage on its
// flavors, scaled down by pods that became reclaimable.
func admittedUsage(obj *kueue.Workload) map[FR]int64 {
	total := map[kueue.PodSetReference]int32{}
	for _, ps := range obj.Spec.PodSets {
		total[ps.Name] = ps.Count
	}
	after := countsAfterReclaim(obj)
	out := map[FR]int64{}
	for _, psa := range obj.Status.Admission.PodSetAssignments {
		count := ptrOr(psa.Count, total[psa.Name])
		reqs := map[string]int64{}
		for name, q := range psa.ResourceUsage {
			reqs[string(name)] = Value(string(name), q)
		}
		if c, ok := after[psa.Name]; ok && c < count && count > 0 {
			for name, v := range reqs {
				reqs[name] = v / int64(count) * int64(c)
			}
		}
		for name, f := range psa.Flavors {
			out[FR{Flavor: string(f), Resource: string(name)}] += reqs[string(name)]
		}
	}
	return out
}

// queueOrder is the order of a ClusterQueue's pending Workloads
// (baseCompareFunc): higher priority first, then earlier queue time, then
// uid.
func queueOrder(a, b *Workload) int {
	return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.QueuedAt.Compare(b.QueuedAt), cmp.Compare(a.UID, b.UID))
}

func (q *Queue) sortPending() { slices.SortStableFunc(q.pending, queueOrder) }

// Pending are the queue's pending Workloads, in queue order.
func (q *Queue) Pending() []*Workload { return slices.Clone(q.pending) }
