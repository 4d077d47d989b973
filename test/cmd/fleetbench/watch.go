package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqinformers "ome.io/quota-manager/api/client/informers/externalversions"
	"ome.io/quota-manager/api/v1beta1"
)

// kick wakes the bench's waits whenever any member's watch delivers a
// change; a send never blocks, and one pending wake-up is enough.
var kick = make(chan struct{}, 1)

func wake() {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// memberWatch is the bench's own watch of one member, directly on its API
// server: the plane's copies there, and its ClusterQueues.
type memberWatch struct {
	aqs, cqs cache.SharedIndexInformer // cqs nil when the member runs no manager
	cancel   context.CancelFunc
}

func watchMember(ctx context.Context, cfg *rest.Config, cqs bool) (*memberWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &memberWatch{cancel: cancel}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { wake() }, UpdateFunc: func(any, any) { wake() }, DeleteFunc: func(any) { wake() }}
	af := aqinformers.NewSharedInformerFactoryWithOptions(versioned.NewForConfigOrDie(cfg), 0,
		aqinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1beta1.OriginLabel + "=" + origin }))
	w.aqs = af.Ome().V1beta1().AcceleratorQuotas().Informer()
	if _, err := w.aqs.AddEventHandler(handler); err != nil {
		cancel()
		return nil, err
	}
	af.Start(ctx.Done())
	synced := []cache.InformerSynced{w.aqs.HasSynced}
	if cqs {
		kf := kueueinformers.NewSharedInformerFactory(kueueclient.NewForConfigOrDie(cfg), 0)
		w.cqs = kf.Kueue().V1beta2().ClusterQueues().Informer()
		if _, err := w.cqs.AddEventHandler(handler); err != nil {
			cancel()
			return nil, err
		}
		kf.Start(ctx.Done())
		synced = append(synced, w.cqs.HasSynced)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		cancel()
		return nil, fmt.Errorf("the bench's watch of the member did not sync")
	}
	return w, nil
}

func (w *memberWatch) stop() { w.cancel() }

// copies is how many copies of the plane the member holds.
func (w *memberWatch) copies() int { return len(w.aqs.GetStore().ListKeys()) }

// copyNominal is the GPUs of the team's copy, -1 when there is none.
func (w *memberWatch) copyNominal(team string) int64 {
	o, ok, _ := w.aqs.GetStore().GetByKey(team)
	if !ok {
		return -1
	}
	for _, b := range o.(*v1beta1.AcceleratorQuota).Spec.Budgets {
		if b.ResourceName == gpu && b.ResourceFlavor == flavor {
			return b.Nominal.Value()
		}
	}
	return 0
}

// cqNominal is the GPUs of the team's ClusterQueue, -1 when there is none.
func (w *memberWatch) cqNominal(team string) int64 {
	o, ok, _ := w.cqs.GetStore().GetByKey(team)
	if !ok {
		return -1
	}
	for _, rg := range o.(*kueuev1beta2.ClusterQueue).Spec.ResourceGroups {
		for _, fq := range rg.Flavors {
			if fq.Name != flavor {
				continue
			}
			for _, r := range fq.Resources {
				if r.Name == gpu {
					return r.NominalQuota.Value()
				}
			}
		}
	}
	return 0
}

// split is what every member is to hold of each team: want[i][team].
type split []map[string]int64

// reached is how long after start every member's copies, and then every
// ClusterQueue made from them, first held the split, as the bench's
// watches delivered them.
type reached struct{ copies, cqs time.Duration }

// waitSplit waits until the first len(want) members hold want, in their
// copies and their ClusterQueues, and says when each was first true.
func (f *fleet) waitSplit(ctx context.Context, start time.Time, want split, limit time.Duration) (reached, error) {
	var r reached
	deadline := time.After(limit)
	for {
		copiesOK, cqsOK, why := f.holds(want)
		now := time.Since(start)
		if copiesOK && r.copies == 0 {
			r.copies = now
		}
		if cqsOK && r.cqs == 0 {
			r.cqs = now
		}
		if copiesOK && cqsOK {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-deadline:
			return r, fmt.Errorf("the members did not reach the split within %s: %s", limit, why)
		case <-kick:
		case <-time.After(time.Second):
		}
	}
}

// holds says whether the members' copies hold want, whether their
// ClusterQueues do (members without a manager count as holding), and the
// first difference.
func (f *fleet) holds(want split) (copiesOK, cqsOK bool, why string) {
	copiesOK, cqsOK = true, true
	for i, teams := range want {
		m := f.members[i]
		for team, n := range teams {
			if got := m.w.copyNominal(team); got != n {
				if copiesOK {
					why = fmt.Sprintf("%s's copy of %s holds %d, not %d", m.name, team, got, n)
				}
				copiesOK = false
			}
			if m.w.cqs == nil {
				continue
			}
			if got := m.w.cqNominal(team); got != n {
				if copiesOK && cqsOK {
					why = fmt.Sprintf("%s's ClusterQueue %s holds %d, not %d", m.name, team, got, n)
				}
				cqsOK = false
			}
		}
	}
	return copiesOK, cqsOK, why
}
