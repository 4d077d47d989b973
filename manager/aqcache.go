package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
)

// EventUndecodable is the reason of the Warning Event the leader emits on
// an AcceleratorQuota its types cannot read.
const EventUndecodable = "Undecodable"

// aqInformer is the AcceleratorQuota cache. It lists and watches through
// the dynamic client and decodes each object on its own, so that one
// object the quota manager's types cannot read (OME's CRD lets
// priorityTier be a string) is reported and skipped instead of failing
// the whole list, which would keep the cache from ever syncing. A skipped
// object that the cache held before stays at its last readable version:
// dropping it would delete the team's Kueue objects over a typo.
//
// Each list (the first, and a relist after a watch ended) is bracketed in
// the event stream, as the webhook's Progress needs (state.State.Progress):
// a QuotaListing published before the list is returned, and a marker
// object (sources.ListEnd) as the list's last item, which the handler
// publishes as QuotaListed. client-go's in-order queue (the
// InOrderInformers feature, on by default) hands a list's deletions and
// then its items, in order, to the handlers after anything queued before,
// so the marker comes after all of them. The list is never streamed (a
// watch-list), whose items come in no fixed order.
func (m *Manager) aqInformer(dyn dynamic.Interface) cache.SharedIndexInformer {
	res := dyn.Resource(v1beta1.SchemeGroupVersion.WithResource("acceleratorquotas"))
	return m.newAQInformer(res.List, res.Watch, streamOf{m})
}

// streamOf publishes into m's stream, which New makes after the informers.
type streamOf struct{ m *Manager }

func (s streamOf) Publish(ctx context.Context, ev events.Event) (uint64, error) {
	return s.m.stream.Publish(ctx, ev)
}

// newAQInformer is aqInformer on the given list and watch of
// AcceleratorQuotas as unstructured objects, publishing the start of each
// list to pub.
func (m *Manager) newAQInformer(list func(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error),
	watchAQs func(context.Context, metav1.ListOptions) (watch.Interface, error), pub events.Publisher) cache.SharedIndexInformer {
	var inf cache.SharedIndexInformer
	held := func(name string) *v1beta1.AcceleratorQuota { return aqGetter(inf)(name) }
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if opts.Continue == "" {
				// The first page: the list's objects follow in the
				// order of names.
				if _, err := pub.Publish(ctx, events.QuotasListing(time.Now())); err != nil {
					return nil, err
				}
			}
			ul, err := list(ctx, opts)
			if err != nil {
				return nil, err
			}
			out := &v1beta1.AcceleratorQuotaList{ListMeta: metav1.ListMeta{
				ResourceVersion: ul.GetResourceVersion(), Continue: ul.GetContinue(), RemainingItemCount: ul.GetRemainingItemCount(),
			}}
			out.Items = make([]v1beta1.AcceleratorQuota, 0, len(ul.Items))
			for i := range ul.Items {
				if aq, _ := m.undecodable.read(&ul.Items[i], held); aq != nil {
					out.Items = append(out.Items, *aq)
				}
			}
			if out.Continue == "" {
				// The last page: the marker, delivered after all the rest.
				out.Items = append(out.Items, v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{
					Name: sources.ListEnd, ResourceVersion: out.ResourceVersion}})
			}
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := watchAQs(ctx, opts)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				u, ok := e.Object.(*unstructured.Unstructured)
				if !ok {
					return e, true // an error's Status
				}
				switch e.Type {
				case watch.Added, watch.Modified:
					aq, decoded := m.undecodable.read(u, held)
					if !decoded {
						return e, false // skipped: the cache keeps what it holds
					}
					e.Object = aq
				default: // deleted, or a bookmark: its metadata is enough
					if e.Type == watch.Deleted {
						m.undecodable.forget(u.GetName())
					}
					aq, err := decodeAQ(u)
					if err != nil {
						aq = &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{
							Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion(), Annotations: u.GetAnnotations(),
						}}
					}
					e.Object = aq
				}
				return e, true
			}), nil
		},
	}
	inf = cache.NewSharedIndexInformerWithOptions(listOnly{lw}, &v1beta1.AcceleratorQuota{}, cache.SharedIndexInformerOptions{})
	_ = inf.SetTransform(slimManagedFields) // before Run: cannot fail
	return inf
}

// slimManagedFields keeps of an AcceleratorQuota's managedFields who wrote
// it and when (each entry without the fields it owns, the large part):
// its events carry them, digested, as the API server's own record of the
// write (events.RecordOf), which replay's trail weighs.
func slimManagedFields(obj any) (any, error) {
	if o, err := meta.Accessor(obj); err == nil {
		mf := o.GetManagedFields()
		for i := range mf {
			mf[i].FieldsV1 = nil
		}
		o.SetManagedFields(mf)
	}
	return obj, nil
}

// listOnly is a ListWatch that client-go never lists through a watch
// (a watch-list): its list brackets itself in the event stream.
type listOnly struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells client-go's reflector to list.
func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// decodeAQ reads u as the quota manager's types, as the typed client would.
func decodeAQ(u *unstructured.Unstructured) (*v1beta1.AcceleratorQuota, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	aq := &v1beta1.AcceleratorQuota{}
	if err := json.Unmarshal(data, aq); err != nil {
		return nil, err
	}
	return aq, nil
}

// undecodable tracks the AcceleratorQuotas this replica cannot decode: a
// log line and ome_quota_undecodable_objects for each, and a Warning Event
// on it from the leader.
type undecodable struct {
	m    *Manager
	mu   sync.Mutex
	objs map[string]*skipped
}

type skipped struct {
	uid       types.UID
	rv, msg   string
	announced bool
}

// read decodes u; when it cannot, it reports u and returns what held has
// of it (nil: leave it out), and false.
func (t *undecodable) read(u *unstructured.Unstructured, held func(string) *v1beta1.AcceleratorQuota) (*v1beta1.AcceleratorQuota, bool) {
	aq, err := decodeAQ(u)
	name := u.GetName()
	if err == nil {
		t.forget(name)
		return aq, true
	}
	old := held(name)
	msg := fmt.Sprintf("the quota manager cannot read this AcceleratorQuota (%v), so it leaves it out of the tree", err)
	if old != nil {
		msg = fmt.Sprintf("the quota manager cannot read this AcceleratorQuota (%v), so it keeps acting on its last readable version (resourceVersion %s)", err, old.ResourceVersion)
	}
	msg += "; give the field the type the quota manager's CRD declares (config/crd)"
	t.mu.Lock()
	if s := t.objs[name]; s == nil || s.rv != u.GetResourceVersion() {
		t.objs[name] = &skipped{uid: u.GetUID(), rv: u.GetResourceVersion(), msg: msg}
		t.m.metrics.Undecodable.WithLabelValues(name).Set(1)
		klog.Background().Error(err, "skipping an AcceleratorQuota the quota manager cannot read", "name", name, "resourceVersion", u.GetResourceVersion(), "keptVersion", old != nil)
	}
	t.mu.Unlock()
	t.announce()
	return old, false
}

// forget ends the report of name, which decodes again or is gone.
func (t *undecodable) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.objs[name]; ok {
		delete(t.objs, name)
		t.m.metrics.Undecodable.DeleteLabelValues(name)
		klog.Background().Info("an AcceleratorQuota reads again, or is gone", "name", name)
	}
}

// announce emits the Events not yet emitted, when this replica leads.
func (t *undecodable) announce() {
	if !t.m.leader.Load() {
		return
	}
	t.m.mu.Lock()
	a := t.m.announce
	t.m.mu.Unlock()
	if a == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.objs))
	for n := range t.objs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := t.objs[n]
		if s.announced {
			continue
		}
		s.announced = true
		obj := &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{Name: n, UID: s.uid, ResourceVersion: s.rv}}
		a.rec.Event(obj, corev1.EventTypeWarning, EventUndecodable, s.msg)
		t.m.metrics.KubeEvents.WithLabelValues(EventUndecodable).Inc()
	}
}
