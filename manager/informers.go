package manager

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events/sources"
)

// aqGetter reads a node from the typed cache.
func aqGetter(inf cache.SharedIndexInformer) func(string) *v1beta1.AcceleratorQuota {
	return func(name string) *v1beta1.AcceleratorQuota {
		obj, ok, err := inf.GetStore().GetByKey(name)
		if err != nil || !ok {
			return nil
		}
		aq, _ := obj.(*v1beta1.AcceleratorQuota)
		return aq
	}
}

// informerSet holds the manager's informers. The AcceleratorQuota
// informer is every mode's, started by the manager; the factories are the
// workload mode's (started by its Start), though the shell reads the
// Kueue informers' caches in every mode: on a management plane they were
// never started and hold nothing.
type informerSet struct {
	lists resourceLists
	core  informers.SharedInformerFactory
	kueue kueueinformers.SharedInformerFactory
	aq    cache.SharedIndexInformer
}

func (s *informerSet) start(stop <-chan struct{}) { go s.aq.Run(stop) }

// waitForSync waits for the AcceleratorQuota cache and for the mode's
// registrations to have their initial lists.
func (s *informerSet) waitForSync(stop <-chan struct{}, regs []cache.ResourceEventHandlerRegistration) error {
	synced := make([]cache.InformerSynced, len(regs))
	for i, r := range regs {
		synced[i] = r.HasSynced
	}
	if !cache.WaitForCacheSync(stop, synced...) {
		return fmt.Errorf("the caches of the mode's informers did not sync")
	}
	if !cache.WaitForCacheSync(stop, s.aq.HasSynced) {
		return fmt.Errorf("the AcceleratorQuota cache did not sync: is the AcceleratorQuota CRD installed?")
	}
	return nil
}

const noResync = time.Duration(0)

// dropManagedFields leaves metadata.managedFields out of the caches: nothing
// reads them, and they are often the largest part of a small object (a
// LocalQueue, a fake Node), so the caches hold less than a plain
// informer's.
func dropManagedFields(obj any) (any, error) {
	if o, err := meta.Accessor(obj); err == nil {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// slimCore is the core informers' transform: the cache keeps, instead of
// a Node, a sources.CachedNode: its name, its resourceVersion and its
// compact form (sources.NodeOf: labels, capacity, allocatable, readiness,
// cordon), the very record its events carry to the state. A Node is then
// held once, as that record, and its resource lists are shared with the
// other Nodes that have equal ones (see resourceLists). Anything else loses
// its managedFields.
func (s *informerSet) slimCore(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return dropManagedFields(obj)
	}
	rec := sources.NodeOf(n)
	rec.Capacity, rec.Allocatable = s.lists.share(rec.Capacity), s.lists.share(rec.Allocatable)
	return &sources.CachedNode{Name: n.Name, ResourceVersion: n.ResourceVersion, Node: rec}, nil
}

// resourceLists shares equal resource lists between the records of
// different Nodes, one copy per distinct list: the Nodes of a node pool
// report the same capacity, and mostly the same allocatable. (Label sets
// are not shared: a real Node's kubernetes.io/hostname label makes its set
// its own.) Records are never modified, so sharing is safe. The table is
// bounded: past maxSharedLists distinct lists it starts again from empty
// (lists already shared stay shared), so a cluster whose Nodes have nothing
// in common costs a bounded table, not one entry per Node.
type resourceLists struct {
	mu    sync.Mutex
	lists map[string]map[string]resource.Quantity
	key   []byte
}

const maxSharedLists = 512

// share returns the list equal to l that the table holds, or stores l.
// Quantities are compared by their string form, the one the event log
// records.
func (t *resourceLists) share(l map[string]resource.Quantity) map[string]resource.Quantity {
	if len(l) == 0 {
		return l
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.key = t.key[:0]
	for _, r := range slices.Sorted(maps.Keys(l)) {
		q := l[r]
		t.key = append(append(append(t.key, r...), 0), q.String()...)
		t.key = append(t.key, 0)
	}
	if got, ok := t.lists[string(t.key)]; ok {
		return got
	}
	if t.lists == nil || len(t.lists) >= maxSharedLists {
		t.lists = make(map[string]map[string]resource.Quantity)
	}
	t.lists[string(t.key)] = l
	return l
}

// slimKueue is the Kueue informers' transform: besides managedFields, a
// LocalQueue and a Cohort lose their status, which nothing reads (the
// applier compares the fields it owns, all in spec and metadata), and a
// ClusterQueue keeps of its status only the usage the event sources read
// (events/sources.QueueOf: flavorsUsage and flavorsReservation). Tens of
// thousands of LocalQueues then cost the cache their spec only.
func slimKueue(obj any) (any, error) {
	switch o := obj.(type) {
	case *kueuev1beta2.LocalQueue:
		o.Status = kueuev1beta2.LocalQueueStatus{}
	case *kueuev1beta2.Cohort:
		o.Status = kueuev1beta2.CohortStatus{}
	case *kueuev1beta2.ClusterQueue:
		o.Status = kueuev1beta2.ClusterQueueStatus{FlavorsUsage: o.Status.FlavorsUsage, FlavorsReservation: o.Status.FlavorsReservation}
	}
	return dropManagedFields(obj)
}
