package manager

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	aqinformers "ome.io/quota-manager/api/client/informers/externalversions"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
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

type informerSet struct {
	core  informers.SharedInformerFactory
	kueue kueueinformers.SharedInformerFactory
	quota aqinformers.SharedInformerFactory
	aq    cache.SharedIndexInformer
}

func (s *informerSet) start(stop <-chan struct{}) {
	s.core.Start(stop)
	s.kueue.Start(stop)
	s.quota.Start(stop)
}

func (s *informerSet) waitForSync(stop <-chan struct{}) error {
	for t, ok := range s.core.WaitForCacheSync(stop) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync", t)
		}
	}
	for t, ok := range s.kueue.WaitForCacheSync(stop) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync: are Kueue's CRDs installed?", t)
		}
	}
	for r, ok := range s.quota.WaitForCacheSync(stop) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync: is the AcceleratorQuota CRD installed?", r)
		}
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

// slimCore is the core informers' transform: a Node keeps only what the
// event sources read of it (events/sources.NodeOf: name, labels,
// spec.unschedulable, status.capacity and allocatable, the Ready
// condition's status), so that the cache of thousands of Nodes holds none of
// their annotations, images, addresses, taints or heartbeats; anything else
// loses its managedFields.
func slimCore(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return dropManagedFields(obj)
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			Labels: n.Labels, DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec:   corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable},
		Status: corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
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
