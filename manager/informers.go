package manager

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
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
