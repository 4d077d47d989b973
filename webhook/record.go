package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// The admission record is a ConfigMap in the manager's namespace that lists
// the tree writes admitted in the last moments. Every replica adds the
// write it admits with an Update that carries the ConfigMap's
// resourceVersion, so admissions are serialized across replicas: a replica
// that loses the race reads the record again and judges again. Before it
// judges, a replica waits until its own state has seen every write the
// record lists land (or learnt that it never will), so it judges on a tree
// that holds every write admitted before its own. docs/webhook.md says why
// that is correct.
const (
	// RecordKey is the ConfigMap's key that holds the record, as JSON.
	RecordKey = "admitted"
	// recordFormat is the record's format; a replica refuses to judge on a
	// record of a newer one.
	recordFormat = 1
	// maxAttempts bounds how often one review judges again after losing a
	// race for the record.
	maxAttempts = 8
)

// Timings of the record. Defaults in DefaultOptions.
type RecordTimings struct {
	// Settle is how long a review waits for the writes admitted before it
	// to reach this replica's state. A write still not seen then is taken
	// to have failed after its admission.
	Settle time.Duration
	// InFlight is how long after its admission a write can still land: a
	// review does not wait for an older one.
	InFlight time.Duration
	// Keep is how long a write stays listed in the record (at least
	// InFlight, plus room for replicas' clocks to differ).
	Keep time.Duration
	// Term is how long a replica holds the right to admit once it took or
	// renewed it (term.go); 0 writes the record for every admission.
	Term time.Duration
}

// admitted is one write the record lists.
type admitted struct {
	Name string                `json:"name"`
	Op   admissionv1.Operation `json:"op"`
	// Generation is the generation the write was judged on (UPDATE and
	// DELETE): once the node is gone or at a later one, the write has
	// landed or can no longer land, as the API server judges a write again
	// when it retries it on a newer object.
	Generation int64     `json:"generation,omitempty"`
	At         time.Time `json:"at"`
	UID        types.UID `json:"uid,omitempty"`
	By         string    `json:"by,omitempty"`
}

type recordData struct {
	Format int `json:"format"`
	// Term is the replica that holds the right to admit (format 2).
	Term    *term      `json:"term,omitempty"`
	Writes  []admitted `json:"writes"`
	Comment string     `json:"comment,omitempty"`
}

// same reports whether a is the write w judged on the same object: the
// API server judging a write again after a conflict, or two clients
// writing the same node at once, of which at most one can land.
func (a admitted) same(w Write) bool {
	return a.Name == w.Name && a.Op == w.Op && a.Generation == w.Generation
}

// settled reports whether the state shows that the write landed, or that
// it can no longer land.
func (a admitted) settled(s *state.State) bool {
	gen, ok := s.Generation(a.Name)
	if a.Op == admissionv1.Create {
		return ok
	}
	return !ok || gen > a.Generation
}

// covers reports whether b is settled whenever a is.
func (a admitted) covers(b admitted) bool {
	return a.Name == b.Name && a.Op != admissionv1.Create && b.Op != admissionv1.Create && b.Generation <= a.Generation
}

// record is the ConfigMap as last read or written, decoded.
type record struct {
	cm     *corev1.ConfigMap
	writes []admitted
	term   *term
}

// Serializer judges tree writes from the manager's state and serializes
// the admissions of every replica through the record.
type Serializer struct {
	ConfigMaps corev1client.ConfigMapInterface
	// Namespace and Name of the record's ConfigMap.
	Namespace, Name string
	// Get reads a node from the API server: the targeted read for a parent
	// that the state does not hold yet.
	Get   func(ctx context.Context, name string) (*v1beta1.AcceleratorQuota, error)
	State StateReader
	// Identity names this replica in the record.
	Identity string
	// Address is where the other replicas reach this replica's webhook
	// (host:port), to hand it their writes while it holds the admission
	// term; empty, this replica never holds it.
	Address string
	// Forward hands a write to the holder of the term at address and
	// returns its verdict, or errNotHolder.
	Forward func(ctx context.Context, address string, f forwarded) (Verdict, error)
	Now     func() time.Time
	RecordTimings
	// Metrics may be nil.
	Metrics *metrics.Metrics

	mu  sync.Mutex
	cur *record
	// gaveUp are the listed writes this replica waited Settle for in vain:
	// it does not wait for them again.
	gaveUp map[admitted]bool
	// seen is the term the cached record shows, seenAt when this replica
	// first saw it: the term runs out on this replica's clock at seenAt
	// plus its length.
	seen   *term
	seenAt time.Time
	// heldUntil is when this replica stops admitting in its term (zero
	// when it holds none), fenceUntil when it may start: a term taken
	// from a holder whose term ran out waits Settle for its last writes.
	heldUntil, fenceUntil time.Time
	// everHeld: this process has held the term (its termWrites are those
	// of its earlier terms).
	everHeld bool
	// stopping: this replica is handing its term back, and takes none.
	stopping bool
	// termWrites are the writes admitted in this replica's terms.
	termWrites []admitted
	// termVersion counts the writes admitted in this replica's terms: a
	// judgement made while another write was admitted is made again, as
	// one that loses the race for the record is.
	termVersion uint64
}

// Judge decides a tree write: it waits until this replica's state holds
// every write admitted before it, judges on the state (state.State.Admit),
// and adds an admitted write to the record with a compare-and-swap, judging
// again when another replica changed the record meanwhile. A dry run is
// judged the same way and recorded nowhere. A lowering of a team's budgets
// (state.State.AdmitLowering) is judged at once and not recorded.
func (z *Serializer) Judge(ctx context.Context, w Write) (v Verdict, err error) {
	t := timings{start: time.Now()}
	defer t.log(ctx, w, &v, &err)
	settleBy := z.Now().Add(z.Settle)
	if w.Old != nil {
		// A lowering of a team's budgets is judged on the old and new spec
		// alone, and cannot make another write's verdict wrong: it needs
		// neither the record nor the writes in flight (docs/webhook.md).
		var a state.Admission
		lowering, behind := false, false
		try := func(s *state.State) {
			a, lowering = s.AdmitLowering(w.Name, w.Old, w.Spec)
			gen, ok := s.Generation(w.Name)
			behind = !lowering && ok && gen < w.Generation
		}
		z.State.View(try)
		if behind {
			// The state has not seen the object the API server judges
			// the write on (the node's last write, a moment ago): wait
			// for it, as every write's judgement does, and look again,
			// rather than take a lowering down the record's path.
			began := time.Now()
			err := z.await(ctx, settleBy, func(s *state.State) bool {
				if gen, ok := s.Generation(w.Name); ok && gen < w.Generation {
					return false
				}
				try(s)
				return true
			})
			t.decide += time.Since(began)
			if err != nil {
				return Verdict{}, err
			}
		}
		if lowering {
			t.outcome = "skipped"
			z.count(t.outcome)
			return verdictOf(a), nil
		}
	}
	rec, err := z.read(ctx, false)
	if err != nil {
		return Verdict{}, err
	}
	// disowned is the term whose holder last said it does not hold it;
	// waited, the run-out term this review has waited Settle past.
	var disowned, waited *term
	for range maxAttempts {
		disowned = nil
		m, held := z.modeOf(rec)
		switch m {
		case holding:
			v, err = z.judgeInTerm(ctx, w, rec, &t)
			if !errors.Is(err, errNotHolder) {
				return v, err
			}
		case forward:
			v, err = z.handOver(ctx, held, w, &t)
			if !errors.Is(err, errNotHolder) {
				return v, err
			}
			disowned = held
			// The holder's term ended, or it restarted: look again.
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return Verdict{}, err
			}
		case lapsing:
			return Verdict{}, fmt.Errorf("the record names this replica as the holder of the admission term, which it no longer holds (it restarted, or could not renew it): no replica admits until the term runs out, within %s", held.Length.Duration)
		case free:
			z.mu.Lock()
			take := z.mayTake()
			z.mu.Unlock()
			if take {
				if _, err := z.acquire(ctx, rec, held); err != nil {
					return Verdict{}, err
				}
				break
			}
			if held != nil && !held.same(waited) {
				// A term ran out: its holder's last admissions may still
				// be landing, and the record does not list them.
				wait := z.termEnd(held).Add(z.Settle).Sub(z.Now())
				if wait > forwardTimeout {
					return Verdict{}, fmt.Errorf("the admission term of replica %s ran out moments ago, and its last admissions may still be landing: retry in %s", held.Holder, wait.Round(time.Second))
				}
				if err := sleepCtx(ctx, wait); err != nil {
					return Verdict{}, err
				}
				waited = held
				settleBy = z.Now().Add(z.Settle)
				break // read the record again
			}
			next, v, err := z.judgeByRecord(ctx, w, rec, settleBy, &t, waited)
			if next == nil {
				return v, err
			}
			rec = next
			continue
		}
		if rec, err = z.read(ctx, true); err != nil {
			return Verdict{}, err
		}
	}
	if disowned != nil {
		return Verdict{}, fmt.Errorf("replica %s, which the admission record names as the holder of the admission term, says it does not hold it (it restarted?): the term runs out within %s", disowned.Holder, disowned.Length.Duration)
	}
	return Verdict{}, fmt.Errorf("the admission term, in ConfigMap %s/%s, changed hands %d times while this write was judged", z.Namespace, z.Name, maxAttempts)
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// judgeByRecord judges w with no term held: it adds an admitted write to
// the record with a compare-and-swap, and judges again when another
// replica changed the record meanwhile. When the record it reads shows a
// term other than waited (one run out that this review waited Settle
// past), it returns that record, and judges nothing.
func (z *Serializer) judgeByRecord(ctx context.Context, w Write, rec *record, settleBy time.Time, t *timings, waited *term) (next *record, v Verdict, err error) {
	t.outcome = "denied"
	// fresh: rec was read from the API server during this review.
	fresh, checkedParent := false, false
	for range maxAttempts {
		if rec.term != nil && !rec.term.same(waited) {
			// A term, held or run out but not waited past: Judge decides.
			return rec, Verdict{}, nil
		}
		t.attempts++
		began := time.Now()
		v, err := z.decide(ctx, w, z.inFlight(rec, w), settleBy)
		t.decide += time.Since(began)
		if err != nil {
			return nil, Verdict{}, err
		}
		if !v.Allowed {
			if !fresh {
				// A denial stands only against the record as it is now:
				// another replica may have admitted a write meanwhile.
				fresh = true
				began := time.Now()
				cur, err := z.read(ctx, true)
				t.read += time.Since(began)
				if err != nil {
					return nil, Verdict{}, err
				}
				if cur.cm.ResourceVersion != rec.cm.ResourceVersion {
					rec = cur
					continue
				}
			}
			if p := missingParent(w, v); p != "" && !checkedParent {
				checkedParent = true
				again, err := z.parentCreated(ctx, p, settleBy)
				if err != nil {
					return nil, Verdict{}, err
				}
				if again {
					continue
				}
			}
			return nil, v, nil
		}
		if w.DryRun {
			t.outcome = "dry-run"
			return nil, v, nil
		}
		began = time.Now()
		outcome, err := z.add(ctx, rec, w)
		t.record += time.Since(began)
		t.outcome = outcome
		z.count(outcome)
		if apierrors.IsConflict(err) {
			// Another replica wrote the record first: judge again on it.
			began = time.Now()
			rec, err = z.read(ctx, true)
			t.read += time.Since(began)
			if err != nil {
				return nil, Verdict{}, err
			}
			fresh = true
			continue
		}
		if err != nil {
			return nil, Verdict{}, fmt.Errorf("recording the admitted write in ConfigMap %s/%s: %w", z.Namespace, z.Name, err)
		}
		return nil, v, nil
	}
	return nil, Verdict{}, fmt.Errorf("the admission record, ConfigMap %s/%s, changed %d times while this write was judged", z.Namespace, z.Name, maxAttempts)
}

// timings say where one judgement's time went; Judge logs them at V(2),
// one line per review ("judged"), which test/cmd/webhookbench reads to
// break a slow write down.
type timings struct {
	start time.Time
	// decide is the time spent waiting for the state to settle the writes
	// in flight and judging on it (the judgement itself is microseconds).
	decide time.Duration
	// record is the time of the record's Updates, read that of its GETs.
	record, read time.Duration
	attempts     int
	// outcome is the record's: written, already, conflict, failed,
	// skipped (a lowering), dry-run, or denied.
	outcome string
}

func (t *timings) log(ctx context.Context, w Write, v *Verdict, err *error) {
	log := klog.FromContext(ctx).V(2)
	if !log.Enabled() {
		return
	}
	log.Info("judged", "uid", w.UID, "node", w.Name, "op", w.Op, "generation", w.Generation, "allowed", v.Allowed, "failed", *err != nil,
		"outcome", t.outcome, "attempts", t.attempts, "total", time.Since(t.start), "decide", t.decide, "record", t.record, "read", t.read)
}

// decide waits until the state has settled every write in flight, or
// until settleBy, and judges w on it. A write in flight is waited for at
// least Settle from its own admission, whatever settleBy says: a
// judgement made again because another write was admitted meanwhile must
// not give up on that write a moment after its admission.
func (z *Serializer) decide(ctx context.Context, w Write, inFlight []admitted, settleBy time.Time) (Verdict, error) {
	start := z.Now()
	if z.Metrics != nil {
		defer func() { z.Metrics.WebhookSettleSeconds.Observe(z.Now().Sub(start).Seconds()) }()
	}
	for _, a := range inFlight {
		if by := a.At.Add(z.Settle); by.After(settleBy) {
			settleBy = by
		}
	}
	var v Verdict
	var open []admitted
	err := z.await(ctx, settleBy, func(s *state.State) bool {
		open = open[:0]
		for _, a := range inFlight {
			if !a.settled(s) {
				open = append(open, a)
			}
		}
		// The state must also hold the node at the generation the API
		// server judged the write on, when it says one.
		if gen, ok := s.Generation(w.Name); w.Generation > 0 && (!ok || gen < w.Generation) {
			open = append(open, admitted{Name: w.Name, Op: w.Op, Generation: w.Generation})
		}
		if len(open) > 0 && z.Now().Before(settleBy) {
			return false
		}
		v = verdictOf(s.Admit(w.Name, w.Spec))
		return true
	})
	if len(open) > 0 {
		z.giveUp(open)
		klog.FromContext(ctx).Info("judged a write while writes admitted before it were not seen to land; taking them as failed",
			"node", w.Name, "inFlight", open, "waited", z.Settle)
	}
	return v, err
}

// await calls done under the state's lock after each event, until it
// reports true. Past settleBy it calls done once more and returns.
func (z *Serializer) await(ctx context.Context, settleBy time.Time, done func(*state.State) bool) error {
	for {
		ok := false
		next := z.State.Observe(func(s *state.State) { ok = done(s) })
		if ok {
			return nil
		}
		left := settleBy.Sub(z.Now())
		if left <= 0 {
			z.State.View(func(s *state.State) { done(s) })
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-next:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// parentCreated reports whether parent p, which the state does not hold,
// exists in the API server (created a moment ago by a path that neither
// the record nor a term sees: the manager's own root, or the webhook off),
// once the state holds it too: the write is then judged again.
func (z *Serializer) parentCreated(ctx context.Context, p string, settleBy time.Time) (bool, error) {
	if _, err := z.Get(ctx, p); err != nil {
		return false, nil
	}
	if err := z.await(ctx, settleBy, func(s *state.State) bool { _, ok := s.Generation(p); return ok }); err != nil {
		return false, err
	}
	return true, nil
}

// missingParent is the parent of the written node when the denial says it
// does not exist.
func missingParent(w Write, v Verdict) string {
	if w.Spec == nil || w.Spec.ParentRef == nil {
		return ""
	}
	for _, d := range v.Denied {
		if d.Node == w.Name && d.Reason == state.ReasonParentMissing {
			return w.Spec.ParentRef.Name
		}
	}
	return ""
}

// inFlight are the writes of the record that can still land, but w's own
// and those given up on.
func (z *Serializer) inFlight(rec *record, w Write) []admitted {
	now := z.Now()
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.pendingLocked(rec.writes, w, now)
}

// pendingLocked are the writes of list that can still land at now, but
// w's own and those given up on; under z.mu.
func (z *Serializer) pendingLocked(list []admitted, w Write, now time.Time) []admitted {
	var out []admitted
	for _, a := range list {
		if now.Before(a.At.Add(z.InFlight)) && !a.same(w) && !z.gaveUp[a] {
			out = append(out, a)
		}
	}
	return out
}

// giveUp remembers writes waited for in vain, and forgets those too old to
// be waited for anyway.
func (z *Serializer) giveUp(open []admitted) {
	now := z.Now()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.gaveUp == nil {
		z.gaveUp = map[admitted]bool{}
	}
	for a := range z.gaveUp {
		if !now.Before(a.At.Add(z.InFlight)) {
			delete(z.gaveUp, a)
		}
	}
	for _, a := range open {
		if !a.At.IsZero() { // not the written node's own generation
			z.gaveUp[a] = true
		}
	}
}

// read returns the record as last read or written, or reads it from the
// API server when force is set or nothing is cached; it creates the
// ConfigMap when it does not exist.
func (z *Serializer) read(ctx context.Context, force bool) (*record, error) {
	z.mu.Lock()
	cur := z.cur
	z.mu.Unlock()
	if cur != nil && !force {
		return cur, nil
	}
	cm, err := z.ConfigMaps.Get(ctx, z.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = z.ConfigMaps.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: z.Name, Namespace: z.Namespace,
				Labels: map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}},
			Data: map[string]string{RecordKey: `{"format":1,"writes":[]}`},
		}, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			cm, err = z.ConfigMaps.Get(ctx, z.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the admission record, ConfigMap %s/%s: %w", z.Namespace, z.Name, err)
	}
	if cm.Labels[v1beta1.ManagedByLabel] != v1beta1.ManagedByValue {
		return nil, fmt.Errorf("ConfigMap %s/%s, the admission record, lacks the label %s=%s, and the manager writes no object without it: "+
			"run kubectl label configmap -n %s %s %s=%s, or point --webhook-admission-record at another name",
			z.Namespace, z.Name, v1beta1.ManagedByLabel, v1beta1.ManagedByValue, z.Namespace, z.Name, v1beta1.ManagedByLabel, v1beta1.ManagedByValue)
	}
	rec, err := decodeRecord(cm)
	if err != nil {
		return nil, fmt.Errorf("the admission record, ConfigMap %s/%s: %w", z.Namespace, z.Name, err)
	}
	z.keep(rec)
	return rec, nil
}

func decodeRecord(cm *corev1.ConfigMap) (*record, error) {
	rec := &record{cm: cm}
	raw, ok := cm.Data[RecordKey]
	if !ok || raw == "" {
		return rec, nil
	}
	var d recordData
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return nil, fmt.Errorf("key %s does not decode (%v): delete the ConfigMap, the manager creates it again", RecordKey, err)
	}
	if d.Format > termFormat {
		return nil, fmt.Errorf("it is in format %d, written by a newer quota manager than this one (format %d): finish the upgrade of every replica", d.Format, termFormat)
	}
	if d.Term != nil && (d.Format < termFormat || d.Term.Length.Duration <= 0) {
		return nil, fmt.Errorf("it names a term in format %d, or a term of no length: delete the ConfigMap, the manager creates it again", d.Format)
	}
	rec.writes, rec.term = d.Writes, d.Term
	return rec, nil
}

// keep caches rec unless a newer one is cached. The resourceVersions are
// compared as numbers, as a hint only: a record older than the one the API
// server holds costs a conflict and a read, never a wrong admission.
func (z *Serializer) keep(rec *record) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.keepLocked(rec)
}

// keepLocked is keep under z.mu.
func (z *Serializer) keepLocked(rec *record) {
	if z.cur != nil && !newer(rec.cm.ResourceVersion, z.cur.cm.ResourceVersion) {
		return
	}
	z.cur = rec
	if !z.seen.same(rec.term) {
		z.seen, z.seenAt = rec.term, z.Now()
	}
	if (rec.term == nil || rec.term.Holder != z.Identity) && !z.heldUntil.IsZero() {
		// Another replica wrote the record over this one's term (it ran
		// out there, or someone edited the record): stop admitting in it.
		z.dropTermLocked()
	}
}

func newer(a, b string) bool {
	x, errx := strconv.ParseUint(a, 10, 64)
	y, erry := strconv.ParseUint(b, 10, 64)
	if errx != nil || erry != nil {
		return a != b
	}
	return x > y
}

// Run keeps the cached record current with a watch on the one ConfigMap,
// so that a replica judges on the writes the others admitted without
// reading the record, and loses the race for it only to a write admitted
// at the same moment. It returns when ctx is done.
func (z *Serializer) Run(ctx context.Context, client cache.Getter) {
	lw := cache.NewFilteredListWatchFromClient(client, "configmaps", z.Namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", z.Name).String()
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	seen := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Labels[v1beta1.ManagedByLabel] != v1beta1.ManagedByValue {
			return
		}
		if rec, err := decodeRecord(cm); err == nil {
			z.keep(rec)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(any) {
			z.mu.Lock()
			z.cur = nil
			// The term went with the record.
			z.dropTermLocked()
			z.mu.Unlock()
		},
	})
	inf.Run(ctx.Done())
}

// add writes the record with w in it, on the condition that it is still
// at rec's resourceVersion. It drops the writes older than Keep and those
// w covers. The write already listed (a judgement again of the same
// write) needs no update.
func (z *Serializer) add(ctx context.Context, rec *record, w Write) (outcome string, err error) {
	now := z.Now()
	a := admitted{Name: w.Name, Op: w.Op, Generation: w.Generation, At: now.UTC(), UID: w.UID, By: z.Identity}
	writes := make([]admitted, 0, len(rec.writes)+1)
	for _, b := range rec.writes {
		if b.same(w) && now.Before(b.At.Add(z.InFlight)) {
			return "already", nil
		}
		if now.After(b.At.Add(z.Keep)) || a.covers(b) {
			continue
		}
		writes = append(writes, b)
	}
	writes = append(writes, a)
	next, err := z.update(ctx, rec, recordFormat, nil, writes)
	switch {
	case apierrors.IsConflict(err):
		return "conflict", err
	case err != nil:
		return "failed", err
	}
	z.keep(next)
	return "written", nil
}

func (z *Serializer) count(outcome string) {
	if z.Metrics != nil {
		z.Metrics.WebhookRecord.WithLabelValues(outcome).Inc()
	}
}
