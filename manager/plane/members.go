package plane

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// MemberSource reads one member cluster for a management plane and
// publishes what it finds as Member events: its ResourceFlavors, its
// root's capacity, and the plane's copies there with what the member's
// Kueue admitted for them, when it answers; why not when it does not. It
// watches the member's AcceleratorQuotas and ResourceFlavors (two watches,
// nothing polled): a change reaches the plane after Settle, and an idle
// member costs nothing but the two open watches. It publishes only a
// change. A member without root (its own manager has not created it, or
// it was deleted) counts as not answering, so that the plane keeps the
// member's shares rather than moving them.
type MemberSource struct {
	Name   string
	Quotas versioned.Interface
	Kueue  kueueclient.Interface
	// Origin is the plane's origin label: the status of the member's
	// copies of that origin says what its Kueue admitted, reserved and
	// borrowed for them. Empty reads no copies.
	Origin string
	// Publish puts an event on the plane's stream.
	Publish func(events.Event)
	// Now stamps the events.
	Now func() time.Time
	// Settle is how long a burst of changes settles before one event says
	// what the member holds. LostAfter is how long a failing list or watch
	// must go on failing before the member is reported as not answering:
	// a watch that a rotated credential or an API server's restart breaks
	// and that the next attempt re-establishes says nothing.
	Settle, LostAfter time.Duration

	kick chan struct{}

	mu      sync.Mutex
	aqs     cache.SharedIndexInformer
	flavors cache.SharedIndexInformer
	// failing holds, per watched resource, the error of its last list or
	// watch attempt while it fails.
	failing map[string]error
	// last is what was published last; nil before the first, or after
	// Republish.
	last *events.Member
	// reads counts the reads of what is watched, published or not.
	reads atomic.Int64
}

// answerWithin is how long a list or watch of a member may wait for its
// API server's answer before the member counts as not answering. A watch
// already open learns of a silent API server from client-go's HTTP/2
// health check (30 s without a frame, then 15 s for a ping's answer).
const answerWithin = 15 * time.Second

// Resources the source watches, as its messages name them.
const (
	watchedQuotas  = "AcceleratorQuotas"
	watchedFlavors = "ResourceFlavors"
)

// Run watches the member until ctx ends.
func (m *MemberSource) Run(ctx context.Context) {
	m.mu.Lock()
	m.kick = make(chan struct{}, 1)
	m.failing = map[string]error{}
	m.aqs = m.informer(watchedQuotas, &v1beta1.AcceleratorQuota{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return m.Quotas.OmeV1beta1().AcceleratorQuotas().List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return m.Quotas.OmeV1beta1().AcceleratorQuotas().Watch(ctx, o)
		})
	m.flavors = m.informer(watchedFlavors, &kueuev1beta2.ResourceFlavor{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return m.Kueue.KueueV1beta2().ResourceFlavors().List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return m.Kueue.KueueV1beta2().ResourceFlavors().Watch(ctx, o)
		})
	aqs, flavors := m.aqs, m.flavors
	m.mu.Unlock()
	go aqs.RunWithContext(ctx)
	go flavors.RunWithContext(ctx)
	go func() {
		// Lists that hold nothing call no handler: say what they found.
		if cache.WaitForCacheSync(ctx.Done(), aqs.HasSynced, flavors.HasSynced) {
			m.Changed()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		// Let a burst settle into one event.
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.Settle):
		}
		select {
		case <-m.kick:
		default:
		}
		m.publish(ctx)
	}
}

// informer watches one resource of the member. Every list and watch
// attempt says whether the member answers: a failure is remembered (and
// reported once it has lasted LostAfter), a success clears it.
func (m *MemberSource) informer(what string, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	// A call that hangs (an API server that accepts connections and
	// answers nothing: client-go retries a failed TLS handshake within
	// the call) counts as failing once it has gone on for answerWithin.
	hung := func() func() {
		t := time.AfterFunc(answerWithin, func() {
			m.attempt(what, fmt.Errorf("the member's API server has not answered within %s", answerWithin))
		})
		return func() { t.Stop() }
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			stop := hung()
			out, err := list(ctx, o)
			stop()
			m.attempt(what, err)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			stop := hung()
			w, err := watchFn(ctx, o)
			stop()
			m.attempt(what, err)
			return w, err
		},
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		m.attempt(what, err)
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.Changed() },
		UpdateFunc: func(any, any) { m.Changed() },
		DeleteFunc: func(any) { m.Changed() },
	})
	return inf
}

// attempt records the outcome of one list or watch of what.
func (m *MemberSource) attempt(what string, err error) {
	m.mu.Lock()
	_, was := m.failing[what]
	if err != nil {
		m.failing[what] = err
	} else {
		delete(m.failing, what)
	}
	m.mu.Unlock()
	switch {
	case err == nil && was:
		m.Changed()
	case err != nil && !was:
		// Said only if it still fails LostAfter from now.
		time.AfterFunc(m.LostAfter, m.Changed)
	}
}

// Changed asks for the member to be read again from what is watched.
func (m *MemberSource) Changed() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Republish forgets what was published, so that the next read is
// published even when it is the same: the plane's state needs a fresh
// report after the cluster joined or left the fleet.
func (m *MemberSource) Republish() {
	m.mu.Lock()
	m.last = nil
	m.mu.Unlock()
	m.Changed()
}

// Reads is how many times the source read the member from its watches,
// whether it published what it read or not.
func (m *MemberSource) Reads() int64 { return m.reads.Load() }

// Objects are the member's AcceleratorQuotas as watched, and whether the
// watch answers and has delivered them all.
func (m *MemberSource) Objects() ([]*v1beta1.AcceleratorQuota, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.aqs == nil || len(m.failing) > 0 || !m.aqs.HasSynced() || !m.flavors.HasSynced() {
		return nil, false
	}
	items := m.aqs.GetStore().List()
	out := make([]*v1beta1.AcceleratorQuota, 0, len(items))
	for _, o := range items {
		out = append(out, o.(*v1beta1.AcceleratorQuota))
	}
	return out, true
}

// publish reads the member from what is watched and publishes the event
// when it differs from the last one.
func (m *MemberSource) publish(ctx context.Context) {
	if ctx.Err() != nil {
		return // stopping: a cancelled watch says nothing of the member
	}
	ev, ok := m.read()
	m.reads.Add(1)
	if !ok {
		return
	}
	m.mu.Lock()
	cur := ev.Member
	same := m.last != nil && m.last.Reachable == cur.Reachable && (!cur.Reachable || reflect.DeepEqual(sortedCapacity(m.last), sortedCapacity(cur)) &&
		reflect.DeepEqual(m.last.Flavors, cur.Flavors) && reflect.DeepEqual(usageText(m.last), usageText(cur)))
	if !same {
		m.last = cur
	}
	m.mu.Unlock()
	if !same {
		m.Publish(ev)
	}
}

// read is the member as watched; false when there is nothing to say yet
// (the watches have not delivered, and nothing failed for LostAfter).
func (m *MemberSource) read() (events.Event, bool) {
	now := m.Now()
	m.mu.Lock()
	var failed string
	for _, what := range []string{watchedQuotas, watchedFlavors} {
		if err := m.failing[what]; err != nil && failed == "" {
			failed = fmt.Sprintf("watching the member's %s: %v", what, err)
		}
	}
	synced := m.aqs.HasSynced() && m.flavors.HasSynced()
	m.mu.Unlock()
	switch {
	case failed != "":
		return events.MemberLost(now, m.Name, failed), true
	case !synced:
		return events.Event{}, false
	}
	var root *v1beta1.AcceleratorQuota
	var copies []*v1beta1.AcceleratorQuota
	for _, o := range m.aqs.GetStore().List() {
		aq := o.(*v1beta1.AcceleratorQuota)
		if aq.Name == v1beta1.RootName {
			root = aq
		}
		if m.Origin != "" && aq.Labels[v1beta1.OriginLabel] == m.Origin {
			copies = append(copies, aq)
		}
	}
	if root == nil {
		return events.MemberLost(now, m.Name, "the member has no root AcceleratorQuota: its workload-mode manager has not created it; its shares are kept until it does"), true
	}
	var names []string
	for _, o := range m.flavors.GetStore().List() {
		names = append(names, o.(*kueuev1beta2.ResourceFlavor).Name)
	}
	capacity := make([]events.MemberCapacity, 0, len(root.Status.Capacity))
	for _, c := range root.Status.Capacity {
		capacity = append(capacity, events.MemberCapacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor,
			Allocatable: c.Allocatable, HighWaterMark: c.HighWaterMark})
	}
	ev := events.MemberSeen(now, m.Name, names, capacity)
	for _, aq := range copies {
		ev.Member.Copies = append(ev.Member.Copies, CopyOf(aq))
		if aq.Spec.Role != v1beta1.RoleClusterQueue {
			continue
		}
		for _, b := range aq.Status.Budgets {
			ev.Member.Usage = append(ev.Member.Usage, events.MemberUsage{Node: aq.Name, Resource: b.ResourceName, Flavor: b.ResourceFlavor,
				Admitted: b.Admitted, Reserved: b.Reserved, Borrowed: b.Borrowed})
		}
	}
	events.SortUsage(ev.Member.Usage)
	slices.SortFunc(ev.Member.Copies, func(a, b events.MemberCopy) int { return cmp.Compare(a.Node, b.Node) })
	return ev, true
}

// CopyOf is how one copy stands: the plane's generation it was made from,
// and that generation again once the member's manager reports its Kueue
// objects in place for the copy's current spec; its resourceVersion, and
// the budgets its spec holds.
func CopyOf(aq *v1beta1.AcceleratorQuota) events.MemberCopy {
	c := events.MemberCopy{Node: aq.Name, Version: aq.ResourceVersion}
	c.Applied, _ = strconv.ParseInt(aq.Annotations[v1beta1.SourceGenerationAnnotation], 10, 64)
	for _, b := range aq.Spec.Budgets {
		cb := events.CopyBudget{Resource: b.ResourceName, Flavor: b.ResourceFlavor, Nominal: b.Nominal}
		if b.BorrowingLimit != nil {
			cb.BorrowingLimit = *b.BorrowingLimit
		}
		c.Budgets = append(c.Budgets, cb)
	}
	slices.SortFunc(c.Budgets, func(a, b events.CopyBudget) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Flavor, b.Flavor))
	})
	if m := apimeta.FindStatusCondition(aq.Status.Conditions, v1beta1.ConditionMaterialized); m != nil &&
		m.Status == metav1.ConditionTrue && m.ObservedGeneration == aq.Generation {
		c.Materialized = c.Applied
	}
	return c
}

// usageText is a member's usage with quantities in canonical form, for
// comparing two reads.
func usageText(m *events.Member) []string {
	out := make([]string, 0, len(m.Usage)+len(m.Copies))
	for _, u := range m.Usage {
		out = append(out, u.Node+" "+u.Resource+"@"+u.Flavor+"="+u.Admitted.String()+"/"+u.Reserved.String()+"/"+u.Borrowed.String())
	}
	for _, c := range m.Copies {
		out = append(out, fmt.Sprintf("copy %s %d/%d %s", c.Node, c.Applied, c.Materialized, c.Version))
		for _, b := range c.Budgets {
			out = append(out, b.Resource+"@"+b.Flavor+"="+b.Nominal.String()+"/"+b.BorrowingLimit.String())
		}
	}
	return out
}

// sortedCapacity is a member's capacity with quantities in canonical form,
// for comparing two reads.
func sortedCapacity(m *events.Member) []string {
	out := make([]string, len(m.Capacity))
	for i, c := range m.Capacity {
		out[i] = c.Resource + "@" + c.Flavor + "=" + c.Allocatable.String() + "/" + c.HighWaterMark.String()
	}
	return out
}
