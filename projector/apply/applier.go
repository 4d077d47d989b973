package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueuelisters "sigs.k8s.io/kueue/client-go/listers/kueue/v1beta2"

	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
)

// FieldManager is the field manager of every write.
const FieldManager = "ome-quota-manager"

// Listers are the informer caches the applier compares with.
type Listers struct {
	Cohorts       kueuelisters.CohortLister
	ClusterQueues kueuelisters.ClusterQueueLister
	LocalQueues   kueuelisters.LocalQueueLister
	// AQ returns a node as cached, or nil.
	AQ func(name string) *v1beta1.AcceleratorQuota
	// LocalQueuesNamed lists the cached LocalQueues of one name in every
	// namespace (an index); nil scans them all.
	LocalQueuesNamed func(name string) []*kueuev1beta2.LocalQueue
}

// Applier writes projections.
type Applier struct {
	Kueue kueueclient.Interface
	AQs   aqtyped.AcceleratorQuotaInterface
	// UrgentKueue and UrgentAQs, when set, carry the writes of a Pass
	// marked Urgent: clients whose rate limiter serves them ahead
	// of the bulk writes, so that an admin's change does not wait for the
	// tokens a bulk pass has reserved.
	UrgentKueue kueueclient.Interface
	UrgentAQs   aqtyped.AcceleratorQuotaInterface
	Listers     Listers
	Metrics     *metrics.Metrics
	// Workers bounds the writes in flight.
	Workers int
	// Now is the clock of the backoff of writes refused for good.
	Now func() time.Time
	// Schema, when set, is the installed CRD's status schema, which lacks
	// fields the quota manager writes: they are left out of status writes.
	Schema atomic.Pointer[StatusSchema]

	// seen remembers, per object, the cached resourceVersion and the hash
	// of the desired object last found to match it: while neither changes,
	// the object is confirmed without decoding the cached copy again. The
	// nodes' workers and the shell's cache handlers use it at once, under
	// seenMu (with inflight); an object swept or found gone is forgotten.
	seenMu         sync.Mutex
	seen, nextSeen map[string]seenAt
	// statusSent remembers, per node, the last status written: its hash
	// and the resourceVersion cached when it was sent. While the cache
	// still holds that version, it has not seen the write yet, and the same
	// status is not sent again.
	statusSent map[string]statusSeen
	// inflight counts the writes being sent, per object key: a cache
	// notification for an object with a write in flight is its echo.
	inflight map[string]int
	// sweeping holds, per object key, the uid of an object the applier
	// deletes: the cache's notification of that deletion is its echo
	// (SweptEcho).
	sweeping map[string]types.UID

	// backoff holds, per object, a write that failed with an error that
	// retrying will not heal (the API server or a webhook refused the
	// object itself). Until its time comes the same desired object is not
	// sent again; each new refusal doubles the wait, up to MaxBackoff. A
	// different desired object, or the object found in place, ends it.
	backoffMu sync.Mutex
	backoff   map[string]*refusal
}

// Backoff of a write refused for a reason retrying does not heal.
const (
	FirstBackoff = 2 * time.Second
	MaxBackoff   = 5 * time.Minute
)

type refusal struct {
	hash  uint64
	delay time.Duration
	until time.Time
	err   error
}

type statusSeen struct {
	before string
	hash   uint64
}

type seenAt struct {
	rv   string
	hash uint64
}

// Result is what one pass did.
type Result struct {
	// Outcomes per node: how the pass left each node's objects, which the
	// shell reports through the event stream (the Materialized condition
	// reads it from the state).
	Outcomes map[string]events.Outcome
	// Writes counts API requests sent; Confirmed counts objects found in
	// place; Swept counts deletions.
	Writes, Confirmed, Swept int
	// Errors are the writes that failed, each naming its object.
	Errors []error
	// RetryAt is the earliest time a write held back by its backoff may
	// be sent again; zero when none is held back.
	RetryAt time.Time
	// pass is how the call was asked to write.
	pass Pass
	// Yielded says the pass stopped between two writes because its yield
	// flag was set (Pass.Yield): the node's objects may be
	// partly written, and another pass is to compare them all.
	Yielded bool
}

// Pass is how one call of the applier writes.
type Pass struct {
	// Urgent sends the writes through UrgentKueue and UrgentAQs, when set.
	Urgent bool
	// Yield, when not nil, stops a node's pass between two writes once it
	// holds true: a bulk pass yields the node to an urgent one, which
	// compares the whole node itself, rather than make it wait for the
	// rest of the node's writes.
	Yield *atomic.Bool
}

// yields reports whether the pass is to stop (ctx ended, or its Yield
// flag is set), and notes a yield in r.
func (r *Result) yields(ctx context.Context) bool {
	if f := r.pass.Yield; f != nil && f.Load() {
		r.Yielded = true
	}
	return r.Yielded || ctx.Err() != nil
}

func (r *Result) retryAt(t time.Time) {
	if r.RetryAt.IsZero() || t.Before(r.RetryAt) {
		r.RetryAt = t
	}
}

type write struct {
	kind, node, name string
	// key and hash identify the object and its desired content, for the
	// backoff of a write refused for good.
	key  string
	hash uint64
	do   func(context.Context) error
}

// ApplyObjects brings the Kueue objects to the projection, when it
// materializes: applies what differs, then sweeps what no node wants, in
// one pass over the whole projection (the shell works node by node, with
// ApplyNode); it reports the outcome per node.
func (a *Applier) ApplyObjects(ctx context.Context, out *projector.Output, p Pass) *Result {
	res := &Result{Outcomes: map[string]events.Outcome{}, pass: p}
	if !out.Materialize {
		return res
	}
	a.seenMu.Lock()
	a.nextSeen = make(map[string]seenAt, len(a.seen))
	a.seenMu.Unlock()
	ws := a.kueueWrites(ctx, out, res)
	a.seenMu.Lock()
	a.seen, a.nextSeen = a.nextSeen, nil
	a.seenMu.Unlock()
	a.run(ctx, ws, res)
	a.run(ctx, a.sweeps(ctx, out, res), res)
	return res
}

// ApplyNode brings one node's Kueue objects to its projection: applies
// what differs, then deletes the managed objects of its name it no longer
// wants (all of them for a node that no longer exists; a LocalQueue of a
// namespace no longer enrolled). Its writes go one after another: the
// shell runs nodes in parallel. The shell reports its outcome through the
// event stream before it projects the node's status. A pass told to yield
// (Pass.Yield) stops between two writes.
func (a *Applier) ApplyNode(ctx context.Context, no *projector.NodeOutput, p Pass) *Result {
	res := &Result{Outcomes: map[string]events.Outcome{}, pass: p}
	if !no.Materialize {
		return res
	}
	out := &projector.Output{Materialize: true}
	out.Add(*no)
	a.runOneByOne(ctx, a.kueueWrites(ctx, out, res), res)
	a.runOneByOne(ctx, a.nodeSweeps(no.Name, out, res), res)
	return res
}

// ApplyNodeStatus writes one node's status when it differs from the
// cached one. A non-empty version makes the write conditional on the
// node's resourceVersion: a conflict writes nothing and asks for the node
// again shortly (Result.RetryAt), once the state has read the newer one.
func (a *Applier) ApplyNodeStatus(ctx context.Context, name string, st *v1beta1.AcceleratorQuotaStatus, version string, p Pass) *Result {
	res := &Result{Outcomes: map[string]events.Outcome{}, pass: p}
	out := &projector.Output{Statuses: map[string]*v1beta1.AcceleratorQuotaStatus{name: st}}
	a.runOneByOne(ctx, a.statusWrites(ctx, out, res, version), res)
	return res
}

// kueue is the Kueue client for the writes of res's pass.
func (a *Applier) kueue(res *Result) kueueclient.Interface {
	if a.UrgentKueue != nil && res.pass.Urgent {
		return a.UrgentKueue
	}
	return a.Kueue
}

// aqs is the AcceleratorQuota client for the writes of res's pass.
func (a *Applier) aqs(res *Result) aqtyped.AcceleratorQuotaInterface {
	if a.UrgentAQs != nil && res.pass.Urgent {
		return a.UrgentAQs
	}
	return a.AQs
}

// setOutcome keeps the worst outcome seen for a node in this pass.
func (r *Result) setOutcome(node string, o events.Outcome) {
	if cur, ok := r.Outcomes[node]; ok && rank(cur.Kind) >= rank(o.Kind) {
		return
	}
	r.Outcomes[node] = o
}

func rank(k events.OutcomeKind) int {
	switch k {
	case events.OutcomeConflict:
		return 2
	case events.OutcomeFailed:
		return 1
	}
	return 0
}

func managed(l map[string]string) bool { return l[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue }

func conflict(kind, ns, name string) events.Outcome {
	where := name
	if ns != "" {
		where = ns + "/" + name
	}
	return events.Outcome{Kind: events.OutcomeConflict, Message: fmt.Sprintf(
		"%s %s exists without the label %s=%s; the manager never takes over an object it did not create: delete or rename it",
		kind, where, v1beta1.ManagedByLabel, v1beta1.ManagedByValue)}
}

// kueueWrites lists the writes to make. An object that conflicts (same
// name, no label) is never written, and the node reports it. A foreign
// Cohort or ClusterQueue holds the node's every write: a LocalQueue that
// pointed at a foreign ClusterQueue would charge the team's workloads to
// somebody else's quota. A foreign LocalQueue holds only itself: whoever
// may create a LocalQueue in one enrolled namespace must not stop the
// team's ClusterQueue and its other LocalQueues from following its budget.
func (a *Applier) kueueWrites(ctx context.Context, out *projector.Output, res *Result) []write {
	var ws []write
	whole := map[string]bool{} // nodes whose Cohort or ClusterQueue is foreign
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	kq := a.kueue(res).KueueV1beta2()
	for _, d := range out.Cohorts {
		name := *d.Name
		cur, err := a.Listers.Cohorts.Get(name)
		whole[name] = whole[name] || cur != nil && !managed(cur.Labels)
		if w, ok := a.decide(res, "Cohort", "", name, name, d, cur, err, cur != nil && managed(cur.Labels)); ok {
			w.do = func(ctx context.Context) error {
				o, err := kq.Cohorts().Apply(ctx, d, opts)
				return a.wrote(w, o, err)
			}
			ws = append(ws, w)
		}
	}
	for _, d := range out.ClusterQueues {
		name := *d.Name
		cur, err := a.Listers.ClusterQueues.Get(name)
		whole[name] = whole[name] || cur != nil && !managed(cur.Labels)
		if w, ok := a.decide(res, "ClusterQueue", "", name, name, d, cur, err, cur != nil && managed(cur.Labels)); ok {
			w.do = func(ctx context.Context) error {
				o, err := kq.ClusterQueues().Apply(ctx, d, opts)
				return a.wrote(w, o, err)
			}
			ws = append(ws, w)
		}
	}
	for _, d := range out.LocalQueues {
		name, ns := *d.Name, *d.Namespace
		cur, err := a.Listers.LocalQueues.LocalQueues(ns).Get(name)
		if w, ok := a.decide(res, "LocalQueue", ns, name, name, d, cur, err, cur != nil && managed(cur.Labels)); ok {
			w.do = func(ctx context.Context) error {
				o, err := kq.LocalQueues(ns).Apply(ctx, d, opts)
				return a.wrote(w, o, err)
			}
			ws = append(ws, w)
		}
	}
	kept := ws[:0]
	for _, w := range ws {
		if !whole[w.node] {
			kept = append(kept, w)
		}
	}
	return kept
}

// decide compares one desired object with its cached copy: a foreign
// object is a conflict, a matching one is confirmed, anything else is a
// write to make.
func (a *Applier) decide(res *Result, kind, ns, name, node string, desired, cached any, getErr error, isManaged bool) (write, bool) {
	exists := getErr == nil && !isNil(cached)
	if exists && !isManaged {
		res.setOutcome(node, conflict(kind, ns, name))
		return write{}, false
	}
	key := ObjectKey(kind, ns, name)
	if exists && a.matches(key, desired, cached) {
		a.forgive(key)
		res.Confirmed++
		a.Metrics.Applied.WithLabelValues(kind).Inc()
		res.setOutcome(node, events.Outcome{Kind: events.OutcomeApplied})
		return write{}, false
	}
	w := write{kind: kind, node: node, name: joinName(ns, name), key: key, hash: hashOf(desired)}
	if r := a.heldBack(w); r != nil {
		res.setOutcome(node, events.Outcome{Kind: events.OutcomeFailed, Message: backoffMessage(r)})
		res.retryAt(r.until)
		return write{}, false
	}
	return w, true
}

// hashOf hashes a desired object's JSON form.
func hashOf(desired any) uint64 {
	data, err := json.Marshal(desired)
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64()
}

// heldBack returns the refusal that holds back w: the same object, with
// the same desired content, refused for good less than its delay ago.
func (a *Applier) heldBack(w write) *refusal {
	a.backoffMu.Lock()
	defer a.backoffMu.Unlock()
	r := a.backoff[w.key]
	if r == nil || r.hash != w.hash || !a.Now().Before(r.until) {
		return nil
	}
	return r
}

// refused records a write refused for good, doubling its delay.
func (a *Applier) refused(w write, err error) *refusal {
	a.backoffMu.Lock()
	defer a.backoffMu.Unlock()
	if a.backoff == nil {
		a.backoff = map[string]*refusal{}
	}
	r := a.backoff[w.key]
	if r == nil || r.hash != w.hash {
		r = &refusal{hash: w.hash}
		a.backoff[w.key] = r
	}
	r.delay = min(max(2*r.delay, FirstBackoff), MaxBackoff)
	r.until, r.err = a.Now().Add(r.delay), err
	return r
}

// forgive ends the backoff of an object written or found in place.
func (a *Applier) forgive(key string) {
	a.backoffMu.Lock()
	defer a.backoffMu.Unlock()
	delete(a.backoff, key)
}

// backoffMessage is Materialized's message for a write held back.
func backoffMessage(r *refusal) string {
	return fmt.Sprintf("%v; retrying will not fix this, so the manager retries it with exponential backoff (every %s now, at most every %s) until the object changes: fix the cause",
		r.err, r.delay, MaxBackoff)
}

// matches reports whether the cached object already holds every field of
// the desired one.
func (a *Applier) matches(key string, desired, cached any) bool {
	data, err := json.Marshal(desired)
	if err != nil {
		return false
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	at := seenAt{hash: h.Sum64()}
	if o, ok := cached.(metav1.Object); ok {
		at.rv = o.GetResourceVersion()
	}
	a.seenMu.Lock()
	known := a.seen[key] == at && at.rv != ""
	a.seenMu.Unlock()
	if known {
		a.remember(key, at)
		return true
	}
	var dm map[string]any
	if err := json.Unmarshal(data, &dm); err != nil {
		return false
	}
	cm, err := toJSONMap(cached)
	if err != nil {
		return false
	}
	// Informer caches hold typed objects without apiVersion and kind.
	delete(dm, "apiVersion")
	delete(dm, "kind")
	if !covers(dm, cm) {
		return false
	}
	a.remember(key, at)
	return true
}

func (a *Applier) remember(key string, at seenAt) {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if a.nextSeen != nil {
		a.nextSeen[key] = at
	} else if a.seen != nil {
		a.seen[key] = at
	}
}

// wrote records a write's outcome: the resourceVersion the API server gave
// the object, with the desired object's hash, so that the next comparison
// and the echo of the write in the cache cost no decoding.
func (a *Applier) wrote(w write, o metav1.Object, err error) error {
	if err == nil && o != nil && o.GetResourceVersion() != "" {
		a.seenMu.Lock()
		if a.seen == nil {
			a.seen = map[string]seenAt{}
		}
		a.seen[w.key] = seenAt{rv: o.GetResourceVersion(), hash: w.hash}
		if a.nextSeen != nil {
			a.nextSeen[w.key] = a.seen[w.key]
		}
		a.seenMu.Unlock()
	}
	return err
}

// forget drops what the applier remembers of an object deleted.
func (a *Applier) forget(key string) {
	a.seenMu.Lock()
	delete(a.seen, key)
	if a.nextSeen != nil {
		delete(a.nextSeen, key)
	}
	a.seenMu.Unlock()
	a.forgive(key)
}

// Echo reports whether a cached Kueue object (key: ObjectKey) is the manager's own doing: a write of it is
// in flight, or its resourceVersion is the one the manager's last write of
// it returned. The shell ignores such notifications.
func (a *Applier) Echo(key, resourceVersion string) bool {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if a.inflight[key] > 0 {
		return true
	}
	at, ok := a.seen[key]
	return ok && at.rv == resourceVersion
}

// sending marks a write of key in flight (+1) or done (-1).
func (a *Applier) sending(key string, d int) {
	if key == "" {
		return
	}
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if a.inflight == nil {
		a.inflight = map[string]int{}
	}
	if a.inflight[key] += d; a.inflight[key] <= 0 {
		delete(a.inflight, key)
	}
}

func isNil(v any) bool {
	switch x := v.(type) {
	case *kueuev1beta2.Cohort:
		return x == nil
	case *kueuev1beta2.ClusterQueue:
		return x == nil
	case *kueuev1beta2.LocalQueue:
		return x == nil
	}
	return v == nil
}

// ObjectKey is how the applier keys a Kueue object in what it remembers
// ("Kind/name", or "LocalQueue/namespace/name"), and how Echo and SweptEcho
// are asked about one.
func ObjectKey(kind, ns, name string) string { return kind + "/" + joinName(ns, name) }

func joinName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// run sends writes through the worker pool, retrying conflicts and
// server-side throttling with backoff.
func (a *Applier) run(ctx context.Context, ws []write, res *Result) {
	if len(ws) == 0 {
		return
	}
	workers := a.Workers
	if workers < 1 {
		workers = 1
	}
	var mu sync.Mutex
	jobs := make(chan write)
	var wg sync.WaitGroup
	for i := 0; i < min(workers, len(ws)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range jobs {
				a.send(ctx, w, res, &mu)
			}
		}()
	}
	for _, w := range ws {
		select {
		case jobs <- w:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
}

// runOneByOne sends writes in order on the calling goroutine, until the
// pass yields (Pass.Yield).
func (a *Applier) runOneByOne(ctx context.Context, ws []write, res *Result) {
	var mu sync.Mutex
	for _, w := range ws {
		if res.yields(ctx) {
			return
		}
		a.send(ctx, w, res, &mu)
	}
}

// send makes one write, retrying conflicts and server-side throttling with
// backoff, and records its outcome in res under mu.
func (a *Applier) send(ctx context.Context, w write, res *Result, mu *sync.Mutex) {
	a.sending(w.key, +1)
	err := retry.OnError(retry.DefaultBackoff, retriable, func() error { return w.do(ctx) })
	a.sending(w.key, -1)
	verb := "apply"
	if w.kind == "status" {
		verb = "apply-status"
	}
	a.Metrics.Writes.WithLabelValues(w.kind, verb).Inc()
	mu.Lock()
	defer mu.Unlock()
	res.Writes++
	if err != nil {
		a.Metrics.WriteErrors.WithLabelValues(w.kind, verb).Inc()
		err = fmt.Errorf("%s %s: %w", w.kind, w.name, err)
		msg := err.Error()
		if w.key != "" && permanent(err) {
			r := a.refused(w, err)
			msg = backoffMessage(r)
			res.retryAt(r.until)
			klog.FromContext(ctx).Error(err, "write refused; retrying will not fix it, so it is retried with backoff", "kind", w.kind, "name", w.name, "retryIn", r.delay)
		} else {
			res.Errors = append(res.Errors, err)
			klog.FromContext(ctx).Error(err, "write failed; it is retried", "kind", w.kind, "name", w.name)
		}
		res.setOutcome(w.node, events.Outcome{Kind: events.OutcomeFailed, Message: msg})
	} else if w.kind != "status" {
		if w.key != "" {
			a.forgive(w.key)
		}
		a.Metrics.Applied.WithLabelValues(w.kind).Inc()
		res.setOutcome(w.node, events.Outcome{Kind: events.OutcomeApplied})
	}
}

// permanent reports whether a failed write was refused for the object
// itself (invalid, forbidden by a webhook or RBAC, a bad request): sending
// the same object again gets the same answer.
func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsMethodNotSupported(err)
}

func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}
