package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/state"
)

// The admission term. Writing the record on every admission puts one
// apiserver write on the path of every raise. Instead, one replica can hold
// the right to admit for a term: it writes the record once to take the
// term and once every third of it to renew it, and admits the writes of the
// term from its own state and its own list of the writes it admitted and
// has not yet seen land, judging them one at a time. Every other replica
// hands the writes that need serializing to the holder (ForwardPath) and
// answers with its verdict. docs/webhook.md says why this is correct
// (a holder that dies, a term that lapses, replicas of an older version).

// termFormat is the record's format while a term is held: a replica that
// knows only the per-write protocol (format 1) refuses to judge on it, so
// that no replica admits a write past the holder.
const termFormat = 2

// ForwardPath is where the holder of the term answers the writes other
// replicas hand it, as JSON (forwarded in, Verdict out).
const ForwardPath = "/admission-term/judge"

// term is who holds the right to admit, as the record says.
type term struct {
	Holder string `json:"holder"`
	// Address is where the other replicas reach the holder's webhook.
	Address string `json:"address"`
	// Renewed is when the holder last took or renewed the term, by its
	// clock: for people. Replicas time a term on their own clocks from
	// the moment they see the record change.
	Renewed time.Time       `json:"renewed"`
	Length  metav1.Duration `json:"length"`
}

func (t *term) same(u *term) bool {
	return t != nil && u != nil && t.Holder == u.Holder && t.Renewed.Equal(u.Renewed) && t.Address == u.Address
}

// errNotHolder is the answer of a replica asked to judge for a term it
// does not hold.
var errNotHolder = errors.New("this replica does not hold the admission term")

// forwarded is what a replica hands the holder.
type forwarded struct {
	Write Write  `json:"write"`
	From  string `json:"from"`
}

// mode is what a replica does with a write that needs serializing.
type mode int

const (
	// free: no term is held; take it (when this replica can hold one), or
	// write the record for this write alone.
	free mode = iota
	// holding: this replica holds the term; judge in it.
	holding
	// forward: another replica holds the term; hand it the write.
	forward
	// lapsing: the record names this replica, but this process does not
	// hold the term (it restarted, or its renewals failed): no replica may
	// admit until the term runs out.
	lapsing
)

// canHold reports whether this replica is made to take the term when it is
// free (it may still be stopping: see mayTake).
func (z *Serializer) canHold() bool { return z.Address != "" && z.Term > 0 }

// mayTake reports, under z.mu, whether this replica may take the term now:
// it can hold one and is not handing its term back.
func (z *Serializer) mayTake() bool { return z.canHold() && !z.stopping }

// modeOf says what to do with a write, given the record rec, and the term
// it shows.
func (z *Serializer) modeOf(rec *record) (mode, *term) {
	now := z.Now()
	z.mu.Lock()
	defer z.mu.Unlock()
	if now.Before(z.heldUntil) {
		return holding, nil
	}
	t := rec.term
	if t == nil {
		return free, nil
	}
	seen := now
	if z.seen.same(t) {
		seen = z.seenAt
	}
	if !now.Before(seen.Add(t.Length.Duration)) {
		return free, t
	}
	if t.Holder == z.Identity {
		if z.everHeld && z.mayTake() {
			// This process's own term, which its renewals failed to keep:
			// it knows every write it admitted, and may take it again.
			return free, t
		}
		return lapsing, t
	}
	return forward, t
}

// termEnd is when t runs out on this replica's clock.
func (z *Serializer) termEnd(t *term) time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.seen.same(t) {
		return z.seenAt.Add(t.Length.Duration)
	}
	return z.Now().Add(t.Length.Duration)
}

// acquire takes the free term with a compare-and-swap on the record. It
// reports false when another replica wrote the record first, or this one
// is handing its term back. prev is the term the record showed, run out:
// its holder's last admissions may still land, so this replica admits
// nothing for Settle.
func (z *Serializer) acquire(ctx context.Context, rec *record, prev *term) (bool, error) {
	z.mu.Lock()
	may := z.mayTake()
	z.mu.Unlock()
	if !may {
		return false, nil
	}
	sent := z.Now()
	t := z.newTerm(sent)
	next, err := z.update(ctx, rec, termFormat, t, z.current(rec.writes, sent))
	if apierrors.IsConflict(err) {
		z.count("conflict")
		return false, nil
	}
	if err != nil {
		z.count("failed")
		return false, fmt.Errorf("taking the admission term in ConfigMap %s/%s: %w", z.Namespace, z.Name, err)
	}
	z.count("written")
	// The record names this replica from the moment it is cached: hold the
	// term from that same moment, or a review in between would find its
	// own name and take itself for a predecessor.
	z.mu.Lock()
	z.keepLocked(next)
	taken := !z.stopping
	if taken {
		z.heldUntil = sent.Add(z.validFor())
		if prev != nil && !(prev.Holder == z.Identity && z.everHeld) {
			z.fenceUntil = sent.Add(z.Settle)
		}
		z.everHeld = true
		z.termVersion++
	}
	z.mu.Unlock()
	if taken {
		klog.FromContext(ctx).Info("took the admission term", "record", z.Namespace+"/"+z.Name, "length", z.Term, "previous", prev)
	}
	return taken, nil
}

// newTerm is this replica's term, taken or renewed at sent.
func (z *Serializer) newTerm(sent time.Time) *term {
	return &term{Holder: z.Identity, Address: z.Address, Renewed: sent.UTC(), Length: metav1.Duration{Duration: z.Term}}
}

// validFor is how long after it sent a successful take or renewal a holder
// admits: less than the term, so that it stops before any other replica
// can see the term run out, even when the clocks' rates differ a little.
func (z *Serializer) validFor() time.Duration { return z.Term - z.Term/5 }

// current are the listed writes still worth listing at now.
func (z *Serializer) current(writes []admitted, now time.Time) []admitted {
	out := make([]admitted, 0, len(writes))
	for _, b := range writes {
		if now.Before(b.At.Add(z.Keep)) {
			out = append(out, b)
		}
	}
	return out
}

// update writes the record from rec's resourceVersion with the term t
// (nil: none) and writes, and returns what it wrote, not yet cached.
func (z *Serializer) update(ctx context.Context, rec *record, format int, t *term, writes []admitted) (*record, error) {
	raw, err := json.Marshal(recordData{Format: format, Term: t, Writes: writes})
	if err != nil {
		return nil, err
	}
	cm := rec.cm.DeepCopy()
	cm.Data = map[string]string{RecordKey: string(raw)}
	out, err := z.ConfigMaps.Update(ctx, cm, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	return &record{cm: out, writes: writes, term: t}, nil
}

// judgeInTerm judges w as the holder of the term, on the state once it
// has settled the writes of the record and those this replica admitted in
// its terms. An admitted write is listed in memory, not in the record. The
// judgement waits for the state with no lock held (the API server may
// call again, with the same write, while it waits), and stands only if no
// other write was admitted, and the term did not change hands, while it
// was made; otherwise it is made again.
func (z *Serializer) judgeInTerm(ctx context.Context, w Write, rec *record, t *timings) (Verdict, error) {
	settleBy := z.Now().Add(z.Settle)
	checkedParent := false
	for range maxAttempts {
		z.mu.Lock()
		version, fence := z.termVersion, z.fenceUntil
		held := z.Now().Before(z.heldUntil)
		z.mu.Unlock()
		if !held {
			return Verdict{}, errNotHolder
		}
		if wait := fence.Sub(z.Now()); wait > 0 {
			// The last holder's final admissions may still be landing.
			began := time.Now()
			if err := sleepCtx(ctx, wait); err != nil {
				return Verdict{}, err
			}
			t.decide += time.Since(began)
			settleBy = z.Now().Add(z.Settle)
			continue
		}
		inFlight := append(z.inFlight(rec, w), z.termInFlight(w)...)
		began := time.Now()
		v, err := z.decide(ctx, w, inFlight, settleBy)
		t.decide += time.Since(began)
		t.attempts++
		if err != nil {
			return Verdict{}, err
		}
		if p := missingParent(w, v); p != "" && !checkedParent {
			checkedParent = true
			again, err := z.parentCreated(ctx, p, settleBy)
			if err != nil {
				return Verdict{}, err
			}
			if again {
				continue
			}
		}
		z.mu.Lock()
		now := z.Now()
		if z.termVersion != version {
			// Another write was admitted, or the term changed hands, while
			// this one was judged.
			z.mu.Unlock()
			z.count("conflict")
			continue
		}
		if !now.Before(z.heldUntil) {
			// The term ran out while the write was judged: another replica
			// may hold it by now.
			z.mu.Unlock()
			return Verdict{}, errNotHolder
		}
		switch {
		case !v.Allowed:
			t.outcome = "denied"
		case w.DryRun:
			t.outcome = "dry-run"
		default:
			t.outcome = z.admitInTerm(w, now)
		}
		z.mu.Unlock()
		if t.outcome == "term" || t.outcome == "already" {
			z.count(t.outcome)
		}
		return v, nil
	}
	return Verdict{}, fmt.Errorf("the write was judged %d times, and each time another write was admitted meanwhile: retry", maxAttempts)
}

// admitInTerm lists w, admitted at now, among the writes of the term, under
// z.mu: "already" when it was listed (the same write judged again), which
// changes nothing another judgement relies on.
func (z *Serializer) admitInTerm(w Write, now time.Time) string {
	a := admitted{Name: w.Name, Op: w.Op, Generation: w.Generation, At: now.UTC(), UID: w.UID, By: z.Identity}
	kept := z.termWrites[:0]
	already := false
	for _, b := range z.termWrites {
		if !now.Before(b.At.Add(z.InFlight)) || a.covers(b) && !b.same(w) {
			continue
		}
		if b.same(w) {
			already = true
		}
		kept = append(kept, b)
	}
	z.termWrites = kept
	if already {
		return "already"
	}
	z.termWrites = append(z.termWrites, a)
	z.termVersion++
	return "term"
}

// termInFlight are the writes this replica admitted in its terms that can
// still land, but w's own and those given up on.
func (z *Serializer) termInFlight(w Write) []admitted {
	now := z.Now()
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.pendingLocked(z.termWrites, w, now)
}

// JudgeForwarded judges a write another replica handed this one, which
// must hold the term, or have held it and be named by the record still
// (its renewals fell behind): errNotHolder otherwise. It never hands it on.
func (z *Serializer) JudgeForwarded(ctx context.Context, f forwarded) (v Verdict, err error) {
	t := timings{start: time.Now()}
	defer t.log(ctx, f.Write, &v, &err)
	for range 2 {
		rec, err := z.read(ctx, false)
		if err != nil {
			return Verdict{}, err
		}
		m, prev := z.modeOf(rec)
		switch {
		case m == holding:
			return z.judgeInTerm(ctx, f.Write, rec, &t)
		case m == free && prev != nil && prev.Holder == z.Identity:
			// Its own term: take it again, then judge.
			if _, err := z.acquire(ctx, rec, prev); err != nil {
				return Verdict{}, err
			}
		default:
			return Verdict{}, errNotHolder
		}
	}
	return Verdict{}, errNotHolder
}

// handOver sends w to the holder of t and returns its verdict.
func (z *Serializer) handOver(ctx context.Context, t *term, w Write, tm *timings) (Verdict, error) {
	if z.Forward == nil {
		return Verdict{}, fmt.Errorf("replica %s holds the admission term and this replica cannot reach it", t.Holder)
	}
	began := time.Now()
	v, err := z.Forward(ctx, t.Address, forwarded{Write: w, From: z.Identity})
	tm.record += time.Since(began)
	tm.attempts++
	switch {
	case errors.Is(err, errNotHolder):
		return Verdict{}, err
	case err != nil:
		tm.outcome = "unforwarded"
		z.count(tm.outcome)
		return Verdict{}, fmt.Errorf("replica %s, which holds the admission term, did not judge the write (at %s): %w", t.Holder, t.Address, err)
	}
	tm.outcome = "forwarded"
	z.count(tm.outcome)
	return v, nil
}

// RunTerm renews the term while this replica holds it, every third of its
// length, and hands it back when ctx is done, listing the writes admitted
// in it that may still land, so that the next holder waits for those
// rather than for a whole term. It returns once the term is handed back.
func (z *Serializer) RunTerm(ctx context.Context) {
	if !z.canHold() {
		return
	}
	tick := time.NewTicker(z.Term / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			z.release(klog.FromContext(ctx))
			return
		case <-tick.C:
			z.renew(ctx)
		}
	}
}

// renew writes the record again with this replica's term, when it holds
// one, or held it and the record names it still: a renewal that succeeds
// shows that no other replica took the term meanwhile, as that would have
// changed the record.
func (z *Serializer) renew(ctx context.Context) {
	log := klog.FromContext(ctx)
	z.mu.Lock()
	mine := z.everHeld && !z.stopping
	z.mu.Unlock()
	if !mine {
		return
	}
	rec, err := z.read(ctx, false)
	if err != nil {
		log.Error(err, "renewing the admission term")
		return
	}
	for attempt := 0; ; attempt++ {
		if rec.term == nil || rec.term.Holder != z.Identity {
			z.stepDown(ctx, "the record no longer names this replica")
			return
		}
		sent := z.Now()
		t := z.newTerm(sent)
		next, err := z.update(ctx, rec, termFormat, t, z.current(rec.writes, sent))
		if err == nil {
			z.mu.Lock()
			z.keepLocked(next)
			if !z.stopping {
				if !z.Now().Before(z.heldUntil) {
					z.termVersion++ // a new term: no judgement carries over
				}
				z.heldUntil = sent.Add(z.validFor())
			}
			z.mu.Unlock()
			return
		}
		if !apierrors.IsConflict(err) || attempt > 0 {
			log.Error(err, "renewing the admission term; the next tick tries again")
			return
		}
		// The cached record was not the latest: read it and look again.
		if rec, err = z.read(ctx, true); err != nil {
			log.Error(err, "renewing the admission term; the next tick tries again")
			return
		}
	}
}

// stepDown stops admitting in the term at once.
func (z *Serializer) stepDown(ctx context.Context, why string) {
	z.mu.Lock()
	was := z.Now().Before(z.heldUntil)
	z.dropTermLocked()
	z.mu.Unlock()
	if was {
		klog.FromContext(ctx).Info("stopped admitting in the admission term", "why", why)
	}
}

// dropTermLocked forgets this replica's term, under z.mu: it no longer
// admits in it, nor takes it again as its own, and no judgement made in it
// stands.
func (z *Serializer) dropTermLocked() {
	z.heldUntil = time.Time{}
	z.everHeld = false
	z.termVersion++
}

// maxHandedBack bounds the writes a hand-back lists: more, and the record
// could outgrow a ConfigMap; the term is then left to run out, and the
// next holder waits Settle instead.
const maxHandedBack = 1000

// release hands the term back: it stops admitting and taking the term,
// then writes the record without a term, in the per-write format, listing
// the writes admitted in the term that its state has not yet seen land.
func (z *Serializer) release(log klog.Logger) {
	z.mu.Lock()
	z.stopping = true
	held := z.everHeld
	z.heldUntil = time.Time{}
	z.termVersion++
	z.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for range 3 {
		rec, err := z.read(ctx, true)
		if err != nil {
			log.Error(err, "handing the admission term back; it runs out by itself")
			return
		}
		if rec.term == nil || rec.term.Holder != z.Identity {
			return
		}
		now := z.Now()
		writes := z.current(rec.writes, now)
		z.mu.Lock()
		var open []admitted
		for _, a := range z.termWrites {
			if now.Before(a.At.Add(z.InFlight)) {
				open = append(open, a)
			}
		}
		z.mu.Unlock()
		// Only those not yet seen to land.
		z.State.View(func(s *state.State) {
			for _, a := range open {
				if !a.settled(s) {
					writes = append(writes, a)
				}
			}
		})
		if len(writes) > maxHandedBack {
			log.Info("not handing the admission term back: too many writes in flight to list; it runs out by itself", "inFlight", len(writes))
			return
		}
		next, err := z.update(ctx, rec, recordFormat, nil, writes)
		if err == nil {
			z.keep(next)
			log.Info("handed the admission term back", "record", z.Namespace+"/"+z.Name, "listed", len(writes))
			return
		}
		if !apierrors.IsConflict(err) {
			log.Error(err, "handing the admission term back; it runs out by itself")
			return
		}
	}
}
