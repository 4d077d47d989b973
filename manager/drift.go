package manager

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector/apply"
)

// drift watches the Kueue objects the manager writes: a change that is not
// the echo of the manager's own write or sweep (someone edited, deleted or
// created an object of a node's name) is published as a Drift event, and
// its node compared in full when the event is applied (shell.note), so
// that the log says why the manager writes the object again. Status
// updates, which Kueue makes on every admission, leave the generation
// alone and cost nothing.
type drift struct {
	sh   *shell
	kind string
	// ctx is the manager's run: the publishing ends with it.
	ctx context.Context
}

func (d drift) key(o metav1Object) string {
	return apply.ObjectKey(d.kind, o.GetNamespace(), o.GetName())
}

type metav1Object interface {
	GetNamespace() string
	GetName() string
	GetResourceVersion() string
	GetGeneration() int64
	GetLabels() map[string]string
	GetUID() types.UID
}

// changed publishes a change of o that is not the manager's own doing.
func (d drift) changed(o metav1Object, change events.DriftChange) {
	m := d.sh.m
	if change == events.DriftDeleted {
		if m.applier.SweptEcho(d.key(o), o.GetUID()) {
			return
		}
	} else if m.applier.Echo(d.key(o), o.GetResourceVersion()) {
		return
	}
	if !m.leader.Load() || !m.stateSynced.Load() {
		return // a new leader compares everything
	}
	ev := events.Drifted(time.Now(), o.GetName(), events.Drift{
		Object: d.kind, Namespace: o.GetNamespace(), Name: o.GetName(), Change: change, Version: o.GetResourceVersion(),
	})
	if _, err := m.stream.Publish(d.ctx, ev); err != nil && d.ctx.Err() == nil {
		// The tick's full comparison finds the object all the same.
		klog.FromContext(d.ctx).Error(err, "cannot publish a drift; the next tick compares the object", "object", d.key(o))
	}
}

func (d drift) OnAdd(obj any, initial bool) {
	if o, err := meta.Accessor(obj); err == nil && !initial {
		d.changed(o, events.DriftCreated)
	}
}

func (d drift) OnUpdate(oldObj, newObj any) {
	o, err1 := meta.Accessor(oldObj)
	n, err2 := meta.Accessor(newObj)
	if err1 != nil || err2 != nil {
		return
	}
	if o.GetGeneration() == n.GetGeneration() && o.GetLabels()[v1beta1.ManagedByLabel] == n.GetLabels()[v1beta1.ManagedByLabel] {
		return // status or metadata only
	}
	d.changed(n, events.DriftEdited)
}

func (d drift) OnDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if o, err := meta.Accessor(obj); err == nil {
		d.changed(o, events.DriftDeleted)
	}
}
