package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/state"
)

// The shell materializes the state node by node. The reducer says which
// nodes an event changed (state.Changes); the shell puts their names on a
// work queue, and a worker re-projects that one node and compares its
// objects (a Cohort, or a ClusterQueue and its LocalQueues) and its status
// with the informer caches, writing what differs. Two queues order the
// work as an operator would: urgent holds what an event just changed (an
// admin's budget, a new team, a team's usage), bulk the full comparisons
// (the Synced marker, a new configuration, every tick, a new leader) and
// objects changed behind the manager's back. Workers always take urgent
// first, and a few of them take nothing else, so that a change an admin
// just made is never stuck behind a bulk pass of thousands of LocalQueues.
// Each node's status is written right after its own objects, so teams turn
// Materialized one by one.
type shell struct {
	m            *Manager
	urgent, bulk workqueue.TypedRateLimitingInterface[string]

	keyMu      sync.Mutex
	working    map[string]*hold       // nodes a worker holds: the queues never work on one node at once
	lastStatus map[string]statusWrite // per node: its last status write
	// confirmed holds, per node, what its last pass found in place; the
	// tick skips a node that has not changed since (see resync).
	confirmed map[string]confirmation
	// applied is the time of the last event applied (UnixNano): the
	// shell's clock for what it skips, so that it goes by the stream.
	applied atomic.Int64
}

// confirmation is what a pass that wrote nothing and failed nothing
// compared: the state's Revision of the node, the resourceVersions of the
// node's cached objects (its AcceleratorQuota, and the Kueue objects of its
// name: a Cohort, a ClusterQueue, its LocalQueues in every namespace) as a
// fingerprint taken before the comparison, and when (the time of the last
// event applied then).
type confirmation struct {
	rev     uint64
	objects uint64
	at      time.Time
}

// statusCoalesce is the least time between two status writes of one node.
// A node whose spec an admin changes many times in a row (a script, an
// apply loop) gets its status written at once after the first change, and
// then at most once in this time, with the newest figures. Each status
// write changes the AcceleratorQuota's resourceVersion: written while the
// admin's next update is in admission, it makes the API server retry that
// update and call the webhook again. One status write a second bounds that
// cost; observedGeneration and Materialized lag the spec by at most this
// long in such a burst, and not at all for a change made after a quiet
// second.
//
// A management plane's hold record (status.holds) is not held back: a
// raise on one member waits until the record that allows it has been
// written and read back, so each step of a move would otherwise wait out
// the second. The record changes only as the fleet's copies move, each
// change once, so this adds writes only where an admin's burst moves a
// team's shares.
const statusCoalesce = time.Second

// statusWrite is a node's last status write: when, and the hold record it
// carried.
type statusWrite struct {
	at    time.Time
	holds string
}

// statusHold says how long a node's status write must wait: zero when its
// last status write is at least statusCoalesce old, or when the write
// changes the node's hold record (holds, from holdsKey).
func (sh *shell) statusHold(name string, now time.Time, holds string) time.Duration {
	sh.keyMu.Lock()
	defer sh.keyMu.Unlock()
	if last, ok := sh.lastStatus[name]; ok {
		if d := statusCoalesce - now.Sub(last.at); d > 0 && last.holds == holds {
			return d
		}
		delete(sh.lastStatus, name)
	}
	return 0
}

// statusWritten notes a status write of a node, with the hold record it
// carried.
func (sh *shell) statusWritten(name string, at time.Time, holds string) {
	sh.keyMu.Lock()
	sh.lastStatus[name] = statusWrite{at: at, holds: holds}
	sh.keyMu.Unlock()
}

// holdsKey is a status's hold record in a form two records compare in: ""
// without one.
func holdsKey(st *v1beta1.AcceleratorQuotaStatus) string {
	if st == nil || st.Holds == nil {
		return ""
	}
	b, err := json.Marshal(st.Holds)
	if err != nil {
		return fmt.Sprintf("%+v", *st.Holds)
	}
	return string(b)
}

// forgetStatus drops what the shell remembers of a deleted node's status
// writes.
func (sh *shell) forgetStatus(name string) {
	sh.keyMu.Lock()
	delete(sh.lastStatus, name)
	sh.keyMu.Unlock()
}

// bulkPerEvent is the most nodes one event's changes put on the urgent
// queue; an event that changes more (a capacity drop freezing a subtree)
// goes to bulk.
const bulkPerEvent = 64

// urgentOnlyWorkers take only urgent work.
const urgentOnlyWorkers = 2

func newShell(m *Manager) *shell {
	qm := m.metrics.Queues
	rl := func() workqueue.TypedRateLimiter[string] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 60*time.Second)
	}
	return &shell{
		m: m,
		urgent: workqueue.NewTypedRateLimitingQueueWithConfig(rl(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "urgent", MetricsProvider: qm}),
		bulk: workqueue.NewTypedRateLimitingQueueWithConfig(rl(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bulk", MetricsProvider: qm}),
		working:    map[string]*hold{},
		lastStatus: map[string]statusWrite{},
		confirmed:  map[string]confirmation{},
	}
}

// note takes what one applied event changed; the consumer calls it.
func (sh *shell) note(ev events.Event, c state.Changes) {
	sh.applied.Store(ev.Time.UnixNano())
	if !sh.m.leader.Load() || !sh.m.stateSynced.Load() {
		return // a new leader compares everything; Synced brings All
	}
	switch kind := ev.Kind; {
	case kind == events.KindDrift:
		// An object changed behind the manager's back: the node's
		// objects are compared in full, and what differs written back.
		sh.bulk.Add(ev.Key)
	case c.All:
		// The Synced marker or a new configuration: every node at once.
		sh.resync(true, ev.Time)
	case kind == events.KindTick:
		// A tick is the periodic full comparison: the safety net. It
		// looks at every node, off the consumer's goroutine, so that the
		// events behind the tick (an admin's write the webhook waits for)
		// are not held up.
		go sh.resync(false, ev.Time)
	case len(c.Nodes) > bulkPerEvent:
		for _, n := range c.Nodes {
			sh.bulk.Add(n)
		}
	default:
		for _, n := range c.Nodes {
			sh.urgent.Add(n)
		}
	}
}

// resync puts every node, and the name of every managed Kueue object (an
// orphan has no node), on the bulk queue: a full comparison. With every
// false (a tick) it leaves out the nodes found in place since anything
// they read last changed: a node whose state Revision and cached objects
// are those of its last clean pass (confirm) would be compared to the same
// answer, at a cost the size of the tree on every tick (at 5,000 nodes,
// half a second of a core at once, beside the API server). Of those, a node last
// compared a resync interval ago or more is compared all the same, the
// lot spread over half a tick interval rather than queued at once, so
// that a change the reducer failed to report is still found, and no tick
// is a burst. now is the tick's time, and a pass's confirmation is dated
// with the last event applied before it: what is skipped goes by the
// stream's times, not by this replica's clock.
func (sh *shell) resync(every bool, now time.Time) {
	m := sh.m
	if !m.leader.Load() || !m.stateSynced.Load() {
		return
	}
	m.mu.Lock()
	nodes := m.st.Revisions()
	m.mu.Unlock()
	names := make(map[string]bool, len(nodes))
	var due []string
	var queued, unchanged int
	for _, n := range nodes {
		names[n.Name] = true
		if !every {
			sh.keyMu.Lock()
			c, ok := sh.confirmed[n.Name]
			sh.keyMu.Unlock()
			if ok && c.rev == n.Revision && c.objects == sh.fingerprint(n.Name) {
				if now.Sub(c.at) < m.opts.ResyncInterval {
					unchanged++
				} else {
					due = append(due, n.Name)
				}
				continue
			}
			queued++
		}
		sh.bulk.Add(n.Name)
	}
	if !every {
		fc := m.metrics.FullComparison
		fc.WithLabelValues(metrics.ComparisonQueued).Add(float64(queued))
		fc.WithLabelValues(metrics.ComparisonPaced).Add(float64(len(due)))
		fc.WithLabelValues(metrics.ComparisonUnchanged).Add(float64(unchanged))
		spread := m.opts.TickInterval() / 2
		for i, n := range due {
			sh.bulk.AddAfter(n, spread*time.Duration(i)/time.Duration(len(due)))
		}
	}
	sel := labels.SelectorFromSet(labels.Set{v1beta1.ManagedByLabel: v1beta1.ManagedByValue})
	kq := m.inf.kueue.Kueue().V1beta2()
	var orphans []string
	if l, err := kq.Cohorts().Lister().List(sel); err == nil {
		for _, o := range l {
			orphans = append(orphans, o.Name)
		}
	}
	if l, err := kq.ClusterQueues().Lister().List(sel); err == nil {
		for _, o := range l {
			orphans = append(orphans, o.Name)
		}
	}
	// LocalQueues through their index by name: a node has one in every
	// enrolled namespace, and only a name that is no node's needs its
	// objects looked at, for the manager's label.
	lqs := kq.LocalQueues().Informer()
	for _, n := range lqs.GetIndexer().ListIndexFuncValues(lqByName) {
		if names[n] {
			continue
		}
		if slices.ContainsFunc(localQueuesNamed(lqs)(n), func(o *kueuev1beta2.LocalQueue) bool { return sel.Matches(labels.Set(o.Labels)) }) {
			orphans = append(orphans, n)
		}
	}
	for _, n := range orphans {
		if !names[n] {
			names[n] = true
			sh.bulk.Add(n)
		}
	}
}

// fingerprint hashes the resourceVersions of a node's cached objects: its
// AcceleratorQuota (whose status the pass compares), and the Cohort,
// ClusterQueue and LocalQueues (in every namespace) of its name, present
// or not. Any change to any of them, ours or anybody's, changes it.
func (sh *shell) fingerprint(name string) uint64 {
	m := sh.m
	h := fnv.New64a()
	put := func(kind, ns, rv string) {
		for _, s := range [...]string{kind, ns, rv} {
			_, _ = io.WriteString(h, s)
			_, _ = h.Write([]byte{0}) // a separator: ("ab", "c") is not ("a", "bc")
		}
	}
	if aq := m.applier.Listers.AQ(name); aq != nil {
		put("AcceleratorQuota", "", aq.ResourceVersion)
	}
	// Through the stores, not the listers: a lister's miss builds an
	// error, and most nodes have no Cohort or no ClusterQueue.
	kq := m.inf.kueue.Kueue().V1beta2()
	if o, ok, _ := kq.Cohorts().Informer().GetStore().GetByKey(name); ok {
		if c, _ := o.(*kueuev1beta2.Cohort); c != nil {
			put("Cohort", "", c.ResourceVersion)
		}
	}
	if o, ok, _ := kq.ClusterQueues().Informer().GetStore().GetByKey(name); ok {
		if c, _ := o.(*kueuev1beta2.ClusterQueue); c != nil {
			put("ClusterQueue", "", c.ResourceVersion)
		}
	}
	lqs := localQueuesNamed(kq.LocalQueues().Informer())(name)
	slices.SortFunc(lqs, func(a, b *kueuev1beta2.LocalQueue) int { return strings.Compare(a.Namespace, b.Namespace) })
	for _, o := range lqs {
		put("LocalQueue", o.Namespace, o.ResourceVersion)
	}
	return h.Sum64()
}

// confirm records the end of a pass on a node: with clean set (it wrote
// nothing, failed nothing, held nothing back), that the node was found in
// place at Revision rev with its cached objects as fingerprinted before
// the comparison; otherwise that it must be compared again on the next
// tick.
func (sh *shell) confirm(name string, rev, objects uint64, clean bool) {
	sh.keyMu.Lock()
	defer sh.keyMu.Unlock()
	if clean {
		sh.confirmed[name] = confirmation{rev: rev, objects: objects, at: time.Unix(0, sh.applied.Load())}
	} else {
		delete(sh.confirmed, name)
	}
}

// run starts the workers; they stop with ctx.
func (sh *shell) run(ctx context.Context, workers int) {
	urgent, bulk := make(chan string), make(chan string)
	feed := func(q workqueue.TypedRateLimitingInterface[string], ch chan<- string) {
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			select {
			case ch <- k:
			case <-ctx.Done():
				q.Done(k)
				return
			}
		}
	}
	go feed(sh.urgent, urgent)
	go feed(sh.bulk, bulk)
	go func() {
		<-ctx.Done()
		sh.urgent.ShutDown()
		sh.bulk.ShutDown()
	}()
	for i := 0; i < workers+urgentOnlyWorkers; i++ {
		takesBulk := i >= urgentOnlyWorkers
		go func() {
			for {
				var k string
				q := sh.urgent
				select {
				case k = <-urgent:
				case <-ctx.Done():
					return
				default:
					bulkCh := bulk
					if !takesBulk {
						bulkCh = nil
					}
					select {
					case k = <-urgent:
					case k = <-bulkCh:
						q = sh.bulk
					case <-ctx.Done():
						return
					}
				}
				sh.work(ctx, q, k)
			}
		}()
	}
}

// hold is a worker's hold on a node.
type hold struct {
	q workqueue.TypedRateLimitingInterface[string] // the queue it came from
	// yield stops a bulk pass between two writes: an urgent change wants
	// the node (apply.Pass.Yield).
	yield atomic.Bool
	// then are the queues that found the node held: it goes back on each
	// when the hold ends.
	then []workqueue.TypedRateLimitingInterface[string]
}

// work materializes one node and settles its key in the queue: forgotten
// when done, retried with backoff after an error, put back at the end of a
// write's refusal backoff.
func (sh *shell) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], name string) {
	defer q.Done(name)
	sh.keyMu.Lock()
	h := sh.working[name]
	if h != nil {
		// Another queue's worker holds this node (a bulk comparison
		// writing a team's LocalQueues one by one takes seconds at the
		// default limits): the node comes back on this queue when that
		// hold ends, rather than hold this worker, which an urgent change
		// may need, waiting. An urgent change does not wait for the rest
		// of a bulk pass: that pass stops after its write in flight, and
		// the urgent pass compares the whole node.
		if q == sh.urgent && h.q != sh.urgent {
			h.yield.Store(true)
		}
		if !slices.Contains(h.then, q) {
			h.then = append(h.then, q)
		}
		sh.keyMu.Unlock()
		klog.FromContext(ctx).V(1).Info("node held by another worker; taken again when it is done", "node", name, "yield", q == sh.urgent)
		return
	}
	h = &hold{q: q}
	sh.working[name] = h
	sh.keyMu.Unlock()
	// An urgent change's writes go through the urgent clients, ahead of
	// a bulk pass's.
	p := sh.m.materialize(ctx, name, apply.Pass{Urgent: q == sh.urgent, Yield: &h.yield})
	sh.release(name)
	switch {
	case ctx.Err() != nil:
	case p.yielded:
		q.Forget(name) // the urgent pass release queued compares it all
	case p.failed:
		q.AddRateLimited(name)
	default:
		q.Forget(name)
		if !p.retryAt.IsZero() {
			q.AddAfter(name, time.Until(p.retryAt))
		}
	}
}

// release ends a worker's hold on a node and puts it back on the queues
// that found it held. Only nodes in hand are remembered: a deleted node
// leaves nothing behind.
func (sh *shell) release(name string) {
	sh.keyMu.Lock()
	h := sh.working[name]
	delete(sh.working, name)
	sh.keyMu.Unlock()
	if h != nil {
		for _, q := range h.then {
			q.Add(name)
		}
	}
}

// pass is how materialize left a node.
type pass struct {
	// failed: a write failed, to retry; retryAt: when a write refused for
	// good may be sent again.
	failed  bool
	retryAt time.Time
	// yielded: the pass stopped for an urgent one (apply.Result.Yielded);
	// the node's outcome and status wait for that pass, which compares the
	// whole node.
	yielded bool
}

// materialize compares one node's objects and status with the caches and
// writes what differs; a node that no longer exists has its objects swept.
// The applier's outcome on the node goes through the stream like any other
// input (reportOutcome), and the status is projected once the state holds
// it, so that the status the leader writes is the one a replay of its log
// computes.
func (m *Manager) materialize(ctx context.Context, name string, how apply.Pass) pass {
	if !m.leader.Load() {
		return pass{}
	}
	m.mu.Lock()
	n, exists := projector.NodeFromState(m.st, name)
	rev, _ := m.st.Revision(name)
	var in projector.Input
	if name == v1beta1.RootName {
		in = m.settings()
	} else {
		c := m.st.Config()
		in = projector.NodeSettings(m.st, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources))
	}
	seq := m.st.LastSeq()
	m.mu.Unlock()
	in.EnrolledNamespaces = projector.Namespaces(in.EnrolledNamespaces)
	no := projector.NodeOutput{Name: name, Materialize: len(in.EnrolledNamespaces) > 0}
	if exists {
		no = projector.ProjectNode(&n, in)
	}
	if m.rec != nil {
		// Every event this projection derives from is in the log before
		// any write it causes leaves the manager.
		m.rec.Wait(seq)
	}
	objects := m.shell.fingerprint(name) // before the comparison: what it is sure to have seen
	started := time.Now()
	res := m.applier.ApplyNode(ctx, &no, how)
	m.metrics.ApplySeconds.Observe(time.Since(started).Seconds())
	if res.Yielded {
		return pass{yielded: true}
	}
	if !exists {
		m.shell.forgetStatus(name)
	} else {
		// A node deleted has no outcome to report: the state dropped it
		// with the node. The mode says what the applier's outcome is to
		// the node.
		oseq, err := m.mode.NodeApplied(ctx, name, res.Outcomes[name])
		if err != nil {
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "cannot report the applier's outcome through the event stream; the node is compared again", "node", name)
			}
			return pass{failed: true, retryAt: res.RetryAt}
		}
		// The node as this pass projected its objects, with the outcome
		// the state now holds for them and the stamps it dated: a change
		// made since queued the node again, and its next pass writes the
		// newer status.
		m.mu.Lock()
		n.Reported(m.st)
		m.mu.Unlock()
		st := projector.ProjectStatus(&n, in)
		holds := holdsKey(st)
		if hold := m.shell.statusHold(name, time.Now(), holds); hold > 0 {
			// Written moments ago: the node comes back when the hold
			// ends and writes the newest status then.
			res.RetryAt = earliest(res.RetryAt, time.Now().Add(hold))
		} else {
			if m.rec != nil && oseq > 0 {
				m.rec.Wait(oseq)
			}
			sres := m.applier.ApplyNodeStatus(ctx, name, st, projector.StatusVersion(&n, in), how)
			if sres.Writes > 0 && sres.RetryAt.IsZero() {
				m.shell.statusWritten(name, time.Now(), holds)
			}
			res.Writes += sres.Writes
			res.Errors = append(res.Errors, sres.Errors...)
			// A conditional status write that met a version the state has
			// not read yet is tried again soon: without this the node
			// waited for an unrelated change, or the next tick.
			res.RetryAt = earliest(res.RetryAt, sres.RetryAt)
		}
	}
	m.shell.confirm(name, rev, objects, exists && res.Writes == 0 && len(res.Errors) == 0 && res.RetryAt.IsZero())
	if res.Writes > 0 || len(res.Errors) > 0 {
		klog.FromContext(ctx).V(1).Info("materialized", "node", name, "writes", res.Writes, "confirmed", res.Confirmed, "swept", res.Swept, "errors", len(res.Errors))
	}
	return pass{failed: len(res.Errors) > 0, retryAt: res.RetryAt}
}

// reportOutcome sends the applier's outcome on a node through the stream,
// when it differs from the one the state holds, and waits until the state
// has applied it. A pass that only confirms objects already in place
// reports what the state holds already and sends nothing, so a quiet
// cluster adds nothing to the log, and an outcome event, which asks for no
// comparison itself (state.Changes), can never start another pass. It
// returns the event's sequence number, 0 when nothing was sent. One pass
// at a time works on a node (shell.work), so the state's outcome cannot
// change between the comparison and the event.
func (m *Manager) reportOutcome(ctx context.Context, name string, o events.Outcome) (uint64, error) {
	m.mu.Lock()
	prev := m.st.Outcome(name)
	if o != prev {
		m.announceOutcome(name, prev, o)
	}
	m.mu.Unlock()
	if o == prev || !m.leader.Load() {
		// Nothing new, or the lead was lost during the pass: outcomes
		// are the leader's alone.
		return 0, nil
	}
	seq, err := m.stream.Publish(ctx, events.OutcomeReported(time.Now(), name, o))
	if err != nil {
		return 0, err
	}
	return seq, m.waitApplied(ctx, seq)
}

// waitApplied waits until the state has applied the event seq.
func (m *Manager) waitApplied(ctx context.Context, seq uint64) error {
	for {
		m.mu.Lock()
		done, next := m.st.LastSeq() >= seq, m.applied
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// earliest is the earlier of two times, the zero time meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// lqByName indexes LocalQueues by name, for the sweep of one node's.
const lqByName = "name"

func localQueuesNamed(inf cache.SharedIndexInformer) func(string) []*kueuev1beta2.LocalQueue {
	return func(name string) []*kueuev1beta2.LocalQueue {
		objs, err := inf.GetIndexer().ByIndex(lqByName, name)
		if err != nil {
			return nil
		}
		out := make([]*kueuev1beta2.LocalQueue, 0, len(objs))
		for _, o := range objs {
			if lq, ok := o.(*kueuev1beta2.LocalQueue); ok {
				out = append(out, lq)
			}
		}
		return out
	}
}

func indexByName(obj any) ([]string, error) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return []string{o.GetName()}, nil
}
