package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqinformers "ome.io/quota-manager/api/client/informers/externalversions"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// watcher follows the managed Kueue objects and the nodes' Materialized
// condition in this process's own informers.
type watcher struct {
	mu        sync.Mutex
	managed   map[string]bool
	mat       map[string]bool // node -> Materialized True
	roles     map[string]v1beta1.Role
	gens      map[string]int64 // node -> observedGeneration of a Materialized True
	cqNominal map[string]string
	// since restart: when the managed count first reached a target, and
	// when the first team and all nodes turned Materialized.
	firstTeam time.Time
	cqUpdates atomic.Int64
	lqUpdates atomic.Int64 // LocalQueue updates seen (Kueue's status writes, mostly)
	aqLister  func() []string
	atCount   map[int]time.Time
	atAll     map[int]time.Time
}

func newWatcher(ctx context.Context, cfg *rest.Config) *watcher {
	w := &watcher{managed: map[string]bool{}, mat: map[string]bool{}, roles: map[string]v1beta1.Role{}, gens: map[string]int64{},
		cqNominal: map[string]string{}, atCount: map[int]time.Time{}, atAll: map[int]time.Time{}}
	kf := kueueinformers.NewSharedInformerFactory(kueueclient.NewForConfigOrDie(cfg), 0)
	af := aqinformers.NewSharedInformerFactory(versioned.NewForConfigOrDie(cfg), 0)
	kq := kf.Kueue().V1beta2()
	track := func(kind string) cache.ResourceEventHandlerFuncs {
		set := func(obj any, present bool) {
			o, ok := obj.(metav1.Object)
			if !ok {
				if t, ok2 := obj.(cache.DeletedFinalStateUnknown); ok2 {
					o, _ = t.Obj.(metav1.Object)
				}
			}
			if o == nil {
				return
			}
			key := kind + "/" + o.GetNamespace() + "/" + o.GetName()
			w.mu.Lock()
			defer w.mu.Unlock()
			if present && o.GetLabels()[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue {
				w.managed[key] = true
			} else {
				delete(w.managed, key)
			}
			n := len(w.managed)
			if _, ok := w.atCount[n]; !ok {
				w.atCount[n] = time.Now()
			}
			if cq, ok := obj.(*kueuev1beta2.ClusterQueue); ok && !present {
				delete(w.cqNominal, cq.Name)
			} else if ok {
				for _, rg := range cq.Spec.ResourceGroups {
					for _, f := range rg.Flavors {
						for _, r := range f.Resources {
							if r.Name == "nvidia.com/gpu" {
								w.cqNominal[cq.Name] = r.NominalQuota.String()
							}
						}
					}
				}
			}
		}
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { set(obj, true) },
			UpdateFunc: func(_, obj any) {
				switch kind {
				case "ClusterQueue":
					w.cqUpdates.Add(1)
				case "LocalQueue":
					w.lqUpdates.Add(1)
				}
				set(obj, true)
			},
			DeleteFunc: func(obj any) { set(obj, false) },
		}
	}
	_, _ = kq.Cohorts().Informer().AddEventHandler(track("Cohort"))
	_, _ = kq.ClusterQueues().Informer().AddEventHandler(track("ClusterQueue"))
	_, _ = kq.LocalQueues().Informer().AddEventHandler(track("LocalQueue"))
	aqInf := af.Ome().V1beta1().AcceleratorQuotas().Informer()
	aqSet := func(obj any) {
		aq, ok := obj.(*v1beta1.AcceleratorQuota)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.roles[aq.Name] = aq.Spec.Role
		on := false
		for _, c := range aq.Status.Conditions {
			if c.Type == v1beta1.ConditionMaterialized && c.Status == metav1.ConditionTrue {
				on = true
				w.gens[aq.Name] = c.ObservedGeneration
			}
		}
		if on {
			w.mat[aq.Name] = true
			if aq.Spec.Role == v1beta1.RoleClusterQueue && w.firstTeam.IsZero() {
				w.firstTeam = time.Now()
			}
		} else {
			delete(w.mat, aq.Name)
		}
		n := len(w.mat)
		if _, ok := w.atAll[n]; !ok {
			w.atAll[n] = time.Now()
		}
	}
	_, _ = aqInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: aqSet, UpdateFunc: func(_, o any) { aqSet(o) }})
	w.aqLister = func() []string {
		var out []string
		for _, o := range aqInf.GetStore().List() {
			out = append(out, o.(*v1beta1.AcceleratorQuota).Name)
		}
		return out
	}
	kf.Start(ctx.Done())
	af.Start(ctx.Done())
	kf.WaitForCacheSync(ctx.Done())
	af.WaitForCacheSync(ctx.Done())
	return w
}

// restart forgets the times reached so far: the next run's start.
func (w *watcher) restart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.firstTeam = time.Time{}
	w.atCount, w.atAll = map[int]time.Time{}, map[int]time.Time{}
}

// progress is when the managed objects first numbered objects, when the
// first team and when nodes nodes were Materialized (zero: not yet).
func (w *watcher) progress(objects, nodes int) (o, first, all time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.atCount[objects], w.firstTeam, w.atAll[nodes]
}

func (w *watcher) objects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.managed)
}

func (w *watcher) materialized() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mat)
}

func (w *watcher) aqNames() []string { return w.aqLister() }

func (w *watcher) waitCQ(ctx context.Context, team, nominal string, timeout time.Duration) error {
	return w.wait(ctx, timeout, func() bool { return w.cqNominal[team] == nominal }, "ClusterQueue "+team+" at nominal "+nominal)
}

func (w *watcher) waitGeneration(ctx context.Context, team string, gen int64, timeout time.Duration) error {
	return w.wait(ctx, timeout, func() bool { return w.mat[team] && w.gens[team] >= gen }, fmt.Sprintf("%s Materialized at generation %d", team, gen))
}

func (w *watcher) wait(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting %s for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
