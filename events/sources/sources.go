package sources

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/client-go/tools/cache"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// Handlers publishes informer notifications as events.
type Handlers struct {
	ctx     context.Context
	pub     events.Publisher
	now     func() time.Time
	onError func(error)
}

// New returns handlers that publish to pub with ctx, stamping events with
// now (the shell passes time.Now). onError receives what cannot be
// published, such as an object of an unexpected type or a closed stream;
// it must not block.
func New(ctx context.Context, pub events.Publisher, now func() time.Time, onError func(error)) *Handlers {
	return &Handlers{ctx: ctx, pub: pub, now: now, onError: onError}
}

// ListEnd names the marker object that the manager's AcceleratorQuota
// list appends as its last item, with the list's resourceVersion: no
// AcceleratorQuota can be named so. Delivered after every object of the
// list, it becomes a QuotaListed event.
const ListEnd = "@list-end"

// Quotas handles AcceleratorQuota notifications.
// Each version of one is published, a status write's too, stamped with
// its resourceVersion: the webhook reads from the state how far it has
// seen (state.State.Progress). The list marker (ListEnd) is published as
// a QuotaListed event.
func (h *Handlers) Quotas() cache.ResourceEventHandler {
	return quotaHandler{h.quotas()}
}

// quotaHandler turns the list marker into a QuotaListed event and hands
// everything else to the AcceleratorQuota handler functions.
type quotaHandler struct{ *funcs }

func (q quotaHandler) listEnd(obj any) bool {
	aq, ok := obj.(*v1beta1.AcceleratorQuota)
	if !ok || aq == nil || aq.Name != ListEnd {
		return false
	}
	q.h.publish(events.QuotasListed(q.h.now(), ResourceVersion(aq.ResourceVersion)))
	return true
}

func (q quotaHandler) OnAdd(obj any, initial bool) {
	if !q.listEnd(obj) {
		q.funcs.OnAdd(obj, initial)
	}
}

func (q quotaHandler) OnUpdate(oldObj, newObj any) {
	if !q.listEnd(newObj) {
		q.funcs.OnUpdate(oldObj, newObj)
	}
}

func (q quotaHandler) OnDelete(obj any) {
	if q.name(obj) != ListEnd { // every list holds it: never deleted
		q.funcs.OnDelete(obj)
	}
}

func (h *Handlers) quotas() *funcs {
	f := handler(h, events.KindAcceleratorQuota, QuotaOf, events.QuotaUpserted)
	f.version = func(obj any) uint64 {
		switch o := obj.(type) {
		case *v1beta1.AcceleratorQuota:
			return ResourceVersion(o.ResourceVersion)
		case cache.DeletedFinalStateUnknown:
			if last, ok := o.Obj.(*v1beta1.AcceleratorQuota); ok && last != nil {
				return ResourceVersion(last.ResourceVersion)
			}
		}
		return 0
	}
	return f
}

// ResourceVersion reads a resourceVersion as the number etcd makes it; 0
// when it is not one.
func ResourceVersion(rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Nodes handles Node notifications.
func (h *Handlers) Nodes() cache.ResourceEventHandler {
	return handler(h, events.KindNode, NodeOf, events.NodeUpserted)
}

// Flavors handles Kueue ResourceFlavor notifications.
func (h *Handlers) Flavors() cache.ResourceEventHandler {
	return handler(h, events.KindResourceFlavor, FlavorOf, events.FlavorUpserted)
}

// ClusterQueues handles Kueue ClusterQueue notifications, for their usage.
func (h *Handlers) ClusterQueues() cache.ResourceEventHandler {
	return handler(h, events.KindClusterQueue, QueueOf, events.QueueUpserted)
}

// sameCompact compares two compact forms as the API machinery compares
// objects (quantities by value), and the condition stamps' times by instant:
// the API machinery's own table has no entry for a plain time.Time, whose
// unexported fields it refuses to compare.
var sameCompact = func() conversion.Equalities {
	eq := apiequality.Semantic.Copy()
	if err := eq.AddFunc(func(a, b time.Time) bool { return a.Equal(b) }); err != nil {
		panic(err)
	}
	return eq
}()

// funcs are an informer's handler functions for one kind. With version
// set, each event carries the object's resourceVersion, and an update is
// published whenever it changes, even when nothing the state reads did.
type funcs struct {
	h       *Handlers
	kind    events.Kind
	upsert  func(obj any, what string) (events.Event, bool)
	same    func(oldObj, newObj any) bool
	name    func(obj any) string
	version func(obj any) uint64
}

func (f *funcs) OnAdd(obj any, _ bool) { f.publish(obj, "an added object") }

func (f *funcs) OnUpdate(oldObj, newObj any) {
	if f.same(oldObj, newObj) && (f.version == nil || f.version(oldObj) == f.version(newObj)) {
		return // nothing the state reads has changed
	}
	f.publish(newObj, "an updated object")
}

func (f *funcs) publish(obj any, what string) {
	ev, ok := f.upsert(obj, what)
	if !ok {
		return
	}
	if f.version != nil {
		ev.Version = f.version(obj)
	}
	f.h.publish(ev)
}

func (f *funcs) OnDelete(obj any) {
	name := f.name(obj)
	if name == "" {
		f.h.onError(fmt.Errorf("%s handler got a deleted object of type %T without a name: the informer is wired to the wrong handler", f.kind, obj))
		return
	}
	ev := events.Deleted(f.h.now(), f.kind, name)
	if f.version != nil {
		ev.Version = f.version(obj)
	}
	f.h.publish(ev)
}

// handler builds the add/update/delete functions for one object type T
// whose compact form is P.
func handler[T interface {
	*O
	GetName() string
}, O any, P any](h *Handlers, kind events.Kind, compact func(T) *P, upserted func(time.Time, *P) events.Event) *funcs {
	typed := func(obj any, what string) (T, bool) {
		o, ok := obj.(T)
		if !ok || o == nil {
			h.onError(fmt.Errorf("%s handler got %s of type %T, not a %s: the informer is wired to the wrong handler", kind, what, obj, kind))
		}
		return o, ok && o != nil
	}
	return &funcs{
		h: h, kind: kind,
		upsert: func(obj any, what string) (events.Event, bool) {
			o, ok := typed(obj, what)
			if !ok {
				return events.Event{}, false
			}
			return upserted(h.now(), compact(o)), true
		},
		same: func(oldObj, newObj any) bool {
			o, ok1 := oldObj.(T)
			n, ok2 := newObj.(T)
			return ok1 && ok2 && o != nil && n != nil && sameCompact.DeepEqual(compact(o), compact(n))
		},
		name: func(obj any) string {
			switch o := obj.(type) {
			case T:
				if o != nil {
					return o.GetName()
				}
			case cache.DeletedFinalStateUnknown:
				if last, ok := o.Obj.(T); ok && last != nil {
					return last.GetName()
				}
				// Cluster-scoped objects are keyed by name alone.
				return o.Key[strings.LastIndex(o.Key, "/")+1:]
			}
			return ""
		},
	}
}

func (h *Handlers) publish(ev events.Event) {
	if _, err := h.pub.Publish(h.ctx, ev); err != nil {
		h.onError(fmt.Errorf("cannot publish %s event for %q: %w", ev.Kind, ev.Key, err))
	}
}

// QuotaOf is the compact form of an AcceleratorQuota: name, generation,
// spec, status.capacity, the stamps of status.conditions and a plane
// team's hold record, deep-copied; whether it is being deleted (a
// deletionTimestamp), whether it carries the plane's copies finalizer,
// and the record of its managedFields (events.RecordOf).
func QuotaOf(aq *v1beta1.AcceleratorQuota) *events.Quota {
	q := &events.Quota{Name: aq.Name, UID: string(aq.UID), Generation: aq.Generation, Deleting: aq.DeletionTimestamp != nil,
		Record: events.RecordOf(aq.ManagedFields)}
	aq.Spec.DeepCopyInto(&q.Spec)
	for _, c := range aq.Status.Capacity {
		q.Capacity = append(q.Capacity, *c.DeepCopy())
	}
	for _, c := range aq.Status.Conditions {
		q.Conditions = append(q.Conditions, events.Stamp{Type: c.Type, Status: string(c.Status), Since: c.LastTransitionTime.UTC()})
	}
	if aq.Status.Holds != nil {
		q.Holds = aq.Status.Holds.DeepCopy()
	}
	q.Guarded = slices.Contains(aq.Finalizers, v1beta1.CopiesFinalizer)
	return q
}

// NodeOf is the compact form of a Node: labels, capacity, allocatable,
// readiness and whether it is cordoned.
func NodeOf(n *corev1.Node) *events.Node {
	out := &events.Node{
		Name:          n.Name,
		Labels:        maps.Clone(n.Labels),
		Capacity:      quantities(n.Status.Capacity),
		Allocatable:   quantities(n.Status.Allocatable),
		Unschedulable: n.Spec.Unschedulable,
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return out
}

func quantities(l corev1.ResourceList) map[string]resource.Quantity {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]resource.Quantity, len(l))
	for name, q := range l {
		out[string(name)] = q.DeepCopy()
	}
	return out
}

// FlavorOf is the compact form of a ResourceFlavor: its node labels.
func FlavorOf(f *kueue.ResourceFlavor) *events.Flavor {
	return &events.Flavor{Name: f.Name, NodeLabels: maps.Clone(f.Spec.NodeLabels)}
}

// QueueOf is the compact form of a ClusterQueue: per (resource, flavor),
// the admitted and borrowed amounts of status.flavorsUsage and the reserved
// amount of status.flavorsReservation, sorted; and whether the manager owns
// it.
func QueueOf(cq *kueue.ClusterQueue) *events.Queue {
	type key struct{ resource, flavor string }
	usage := map[key]*events.Usage{}
	at := func(flavor kueue.ResourceFlavorReference, r corev1.ResourceName) *events.Usage {
		k := key{string(r), string(flavor)}
		if usage[k] == nil {
			usage[k] = &events.Usage{Resource: k.resource, Flavor: k.flavor}
		}
		return usage[k]
	}
	for _, f := range cq.Status.FlavorsUsage {
		for _, r := range f.Resources {
			u := at(f.Name, r.Name)
			u.Admitted = r.Total.DeepCopy()
			u.Borrowed = r.Borrowed.DeepCopy()
		}
	}
	for _, f := range cq.Status.FlavorsReservation {
		for _, r := range f.Resources {
			at(f.Name, r.Name).Reserved = r.Total.DeepCopy()
		}
	}
	out := &events.Queue{Name: cq.Name, Managed: cq.Labels[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue}
	for _, k := range slices.SortedFunc(maps.Keys(usage), func(a, b key) int {
		return strings.Compare(a.resource+"\x00"+a.flavor, b.resource+"\x00"+b.flavor)
	}) {
		out.Usage = append(out.Usage, *usage[k])
	}
	return out
}

// RunTicker publishes a Tick at once and then one every interval, until ctx
// is done. It returns ctx's error, or the first publish error. Ticks
// measure only after the Synced marker (see PublishSynced).
func RunTicker(ctx context.Context, pub events.Publisher, every time.Duration, now func() time.Time) error {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		if _, err := pub.Publish(ctx, events.Tick(now())); err != nil {
			return fmt.Errorf("cannot publish a tick: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// PublishSynced waits until every handler registration has handled its
// informer's initial list (ResourceEventHandlerRegistration.HasSynced: each
// listed object has gone through the handler, and so into the stream), then
// publishes the Synced marker. Every object listed at start is therefore in
// an event before it. It returns ctx's error if ctx ends first.
func PublishSynced(ctx context.Context, pub events.Publisher, now func() time.Time, regs ...cache.ResourceEventHandlerRegistration) error {
	synced := make([]cache.InformerSynced, len(regs))
	for i, r := range regs {
		synced[i] = r.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("the informers' initial lists were not all handled: %w", context.Cause(ctx))
	}
	if _, err := pub.Publish(ctx, events.Synced(now())); err != nil {
		return fmt.Errorf("cannot publish the synced marker: %w", err)
	}
	return nil
}

// PublishConfig publishes the configuration in force, normalized. The shell
// publishes it first, before the informers start.
func PublishConfig(ctx context.Context, pub events.Publisher, cfg events.Config, now time.Time) error {
	ev := events.ConfigChanged(now, cfg)
	if err := ev.Validate(); err != nil {
		return err
	}
	_, err := pub.Publish(ctx, ev)
	return err
}
