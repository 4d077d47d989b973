package apply

import (
	"context"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
)

// sweep notes that the object of key with uid is being deleted by the
// applier; an empty uid takes the note back (the delete failed).
func (a *Applier) sweep(key string, uid types.UID) {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if uid == "" {
		delete(a.sweeping, key)
		return
	}
	if a.sweeping == nil {
		a.sweeping = map[string]types.UID{}
	}
	a.sweeping[key] = uid
}

// SweptEcho reports whether the deletion of a cached Kueue object (key as
// for Echo) with uid is the applier's own sweep, and forgets the sweep.
func (a *Applier) SweptEcho(key string, uid types.UID) bool {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if a.sweeping[key] != uid || uid == "" {
		return false
	}
	delete(a.sweeping, key)
	return true
}

// sweeps deletes managed objects that no node wants: a deleted node, a role
// changed in place, a namespace no longer enrolled. Objects of held nodes
// stay, and so does anything without our label.
func (a *Applier) sweeps(ctx context.Context, out *projector.Output, res *Result) []write {
	sel := labels.SelectorFromSet(labels.Set{v1beta1.ManagedByLabel: v1beta1.ManagedByValue})
	cohorts, _ := a.Listers.Cohorts.List(sel)
	cqs, _ := a.Listers.ClusterQueues.List(sel)
	lqs, _ := a.Listers.LocalQueues.List(sel)
	return a.sweepsOf(out, res, cohorts, cqs, lqs)
}

// nodeSweeps is sweeps for the objects named after one node.
func (a *Applier) nodeSweeps(name string, out *projector.Output, res *Result) []write {
	var cohorts []*kueuev1beta2.Cohort
	var cqs []*kueuev1beta2.ClusterQueue
	if o, err := a.Listers.Cohorts.Get(name); err == nil && managed(o.Labels) {
		cohorts = append(cohorts, o)
	}
	if o, err := a.Listers.ClusterQueues.Get(name); err == nil && managed(o.Labels) {
		cqs = append(cqs, o)
	}
	var lqs []*kueuev1beta2.LocalQueue
	for _, o := range a.localQueuesNamed(name) {
		if managed(o.Labels) {
			lqs = append(lqs, o)
		}
	}
	return a.sweepsOf(out, res, cohorts, cqs, lqs)
}

// localQueuesNamed lists the cached LocalQueues of one name, in every
// namespace.
func (a *Applier) localQueuesNamed(name string) []*kueuev1beta2.LocalQueue {
	if a.Listers.LocalQueuesNamed != nil {
		return a.Listers.LocalQueuesNamed(name)
	}
	all, _ := a.Listers.LocalQueues.List(labels.Everything())
	var out []*kueuev1beta2.LocalQueue
	for _, o := range all {
		if o.Name == name {
			out = append(out, o)
		}
	}
	return out
}

// sweepsOf deletes, of the managed objects given, those out does not want.
func (a *Applier) sweepsOf(out *projector.Output, res *Result, cohorts []*kueuev1beta2.Cohort, cqs []*kueuev1beta2.ClusterQueue, lqs []*kueuev1beta2.LocalQueue) []write {
	want := map[string]bool{}
	for _, d := range out.Cohorts {
		want[ObjectKey("Cohort", "", *d.Name)] = true
	}
	for _, d := range out.ClusterQueues {
		want[ObjectKey("ClusterQueue", "", *d.Name)] = true
	}
	for _, d := range out.LocalQueues {
		want[ObjectKey("LocalQueue", *d.Namespace, *d.Name)] = true
	}
	var ws []write
	del := func(kind, ns, name string, uid types.UID, f func(context.Context, metav1.DeleteOptions) error) {
		key := ObjectKey(kind, ns, name)
		if want[key] || out.Held[name] || res.Outcomes[name].Kind == events.OutcomeConflict {
			return
		}
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
		ws = append(ws, write{kind: kind, node: name, name: joinName(ns, name), do: func(ctx context.Context) error {
			a.sweep(key, uid)
			err := f(ctx, opts)
			if err != nil {
				a.sweep(key, "")
			}
			if err == nil {
				a.Metrics.Swept.WithLabelValues(kind).Inc()
				res.addSwept()
			}
			if err == nil || apierrors.IsNotFound(err) {
				// Gone: what was remembered of it goes too, or a tree
				// that keeps changing would keep a record per object it
				// ever had.
				a.forget(key)
				return nil
			}
			return err
		}})
	}
	for _, o := range cohorts {
		del("Cohort", "", o.Name, o.UID, func(ctx context.Context, opts metav1.DeleteOptions) error {
			return a.kueue(res).KueueV1beta2().Cohorts().Delete(ctx, o.Name, opts)
		})
	}
	for _, o := range cqs {
		del("ClusterQueue", "", o.Name, o.UID, func(ctx context.Context, opts metav1.DeleteOptions) error {
			return a.kueue(res).KueueV1beta2().ClusterQueues().Delete(ctx, o.Name, opts)
		})
	}
	for _, o := range lqs {
		del("LocalQueue", o.Namespace, o.Name, o.UID, func(ctx context.Context, opts metav1.DeleteOptions) error {
			return a.kueue(res).KueueV1beta2().LocalQueues(o.Namespace).Delete(ctx, o.Name, opts)
		})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].kind+ws[i].name < ws[j].kind+ws[j].name })
	return ws
}

var sweptMu sync.Mutex

func (r *Result) addSwept() {
	sweptMu.Lock()
	r.Swept++
	sweptMu.Unlock()
}
