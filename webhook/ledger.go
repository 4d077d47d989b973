package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// maxAttempts bounds how often one review judges again after losing the
// compare-and-swap of the ledger to another admission.
const maxAttempts = 8

// Ledger judges tree writes on the manager's state plus the reservations
// of the AdmissionLedger, and reserves each admitted write there with a
// compare-and-swap, so that every replica's later judgement counts it
// until its state shows the write landed.
type Ledger struct {
	Client typed.AdmissionLedgerInterface
	Name   string
	State  StateReader
	// Identity names this replica in the reservations it writes.
	Identity string
	// Expiry is how long, after this replica first saw it, a reservation
	// that its state cannot settle is counted: longer than the API
	// server's --request-timeout, which ends every write that was admitted
	// and has not landed.
	Expiry time.Duration
	// Patience is how long a review waits for related reservations to
	// settle before it judges with them uncertain. It is not a safety
	// bound: an unsettled reservation is counted either way.
	Patience time.Duration
	// Hold is how long a standing reservation is kept after the last
	// write it admitted, so that a budget raised again and again writes
	// the ledger once. Not a safety bound either.
	Hold time.Duration
	// Now is this replica's clock (time.Now). Only durations on it are
	// compared, never its readings with another replica's.
	Now func() time.Time
	// Metrics may be nil.
	Metrics *metrics.Metrics

	mu  sync.Mutex
	cur *v1beta1.AdmissionLedger
	// seen is when this replica first saw each reservation, by review uid.
	seen map[string]time.Time
	// fencedUntil: until then nothing is reserved, for fenceReason: the
	// ledger was deleted with reservations in it.
	fencedUntil time.Time
	fenceReason string
	// standing are this replica's standing reservations, newest last.
	standing []*standing
}

// standing is one of this replica's standing reservations: while it is
// fresh (written less than reuse ago), a later write of its object within
// its spec (state.Within) is admitted without writing the ledger. It is
// removed once no write has used it for Hold and every write it stood
// for has settled.
type standing struct {
	review, node, uid, since string
	spec                     *v1beta1.AcceleratorQuotaSpec
	written                  time.Time // before the Update that wrote it, on this replica's clock
	used                     time.Time
	releasing                bool
	writes                   []v1beta1.Reservation
}

// reuse bounds how long after it was written a standing reservation
// admits writes: each of them lands, if ever, within the API server's
// --request-timeout, so every replica counts the reservation until the last
// of them can no longer land as long as Expiry exceeds that timeout by
// reuse.
const reuse = 10 * time.Second

// Judge decides a tree write (Reviewer.Judge). It waits until the state
// has seen at least the ledger's floor and the object the write was judged
// on, and for related reservations to settle (at most Patience), judges on
// the state, then on every combination of the related reservations still
// unsettled, and reserves an admitted write in the ledger.
func (l *Ledger) Judge(ctx context.Context, w Write) (v Verdict, err error) {
	start := l.Now()
	outcome := "denied"
	defer func() {
		if l.Metrics != nil {
			l.Metrics.WebhookLedger.WithLabelValues(outcome).Inc()
			l.Metrics.WebhookPendingSeconds.Observe(l.Now().Sub(start).Seconds())
		}
		if log := klog.FromContext(ctx).V(2); log.Enabled() {
			log.Info("judged", "uid", w.UID, "node", w.Name, "op", w.Op, "base", w.Base, "allowed", v.Allowed,
				"failed", err != nil, "outcome", outcome, "total", l.Now().Sub(start))
		}
	}()
	base := parseVersion(w.Base)
	if w.Old != nil {
		// A lowering of a team's budgets cannot make another write's
		// verdict wrong, whatever else lands: it needs no reservation.
		var a state.Admission
		lowering := false
		if err := l.await(ctx, start, func(s *state.State) (bool, error) {
			if s.Progress() < base {
				return false, nil
			}
			a, lowering = s.AdmitLowering(w.Name, w.Old, w.Spec)
			return true, nil
		}); err != nil {
			return Verdict{}, err
		}
		if lowering {
			outcome = "lowering"
			return verdictOf(a), nil
		}
	}
	led, err := l.read(ctx, false)
	if err != nil {
		return Verdict{}, err
	}
	fresh := false
	for range maxAttempts {
		j, err := l.judgeOn(ctx, start, led, w, base)
		if err != nil {
			outcome = "unavailable"
			return Verdict{}, err
		}
		if !j.verdict.Allowed && !fresh {
			// A denial stands only against the ledger as it is now: the
			// cached one may lack a reservation made a moment ago on
			// another replica (a parent created just before its child).
			fresh = true
			cur, err := l.read(ctx, true)
			if err != nil {
				return Verdict{}, err
			}
			if cur.ResourceVersion != led.ResourceVersion {
				led = cur
				continue
			}
		}
		if j.verdict.Allowed && !w.DryRun && !j.already && l.stand(led, w) {
			outcome = "standing"
			return j.verdict, nil
		}
		if !j.verdict.Allowed || w.DryRun || j.already {
			if j.verdict.Allowed {
				outcome = "dry-run"
				if j.already {
					outcome = "already"
				}
			}
			return j.verdict, nil
		}
		next, err := l.reserve(ctx, led, w, j)
		if apierrors.IsConflict(err) {
			outcome = "conflict"
			if l.Metrics != nil {
				l.Metrics.WebhookLedger.WithLabelValues(outcome).Inc()
			}
			if led, err = l.read(ctx, true); err != nil {
				return Verdict{}, err
			}
			fresh = true
			continue
		}
		if err != nil {
			outcome = "failed"
			return Verdict{}, err
		}
		l.keep(next)
		outcome = "reserved"
		return j.verdict, nil
	}
	outcome = "unavailable"
	return Verdict{}, fmt.Errorf("the admission ledger %s changed %d times while this write was judged", l.Name, maxAttempts)
}

// judgement is what one look at the state found.
type judgement struct {
	verdict Verdict
	// settled are the reservations this replica's state shows settled,
	// progress how far it had seen then: the floor once they are removed.
	settled  map[string]bool
	progress uint64
	already  bool
}

func (l *Ledger) judgeOn(ctx context.Context, start time.Time, led *v1beta1.AdmissionLedger, w Write, base uint64) (judgement, error) {
	need := max(parseVersion(led.Spec.Floor), base)
	patience := start.Add(l.Patience)
	var j judgement
	var related []v1beta1.Reservation
	var snap struct {
		tree    state.Tree
		marks   map[state.Pair]state.Amount
		flavors map[string]bool
	}
	var cfg events.Config
	err := l.await(ctx, patience, func(s *state.State) (bool, error) {
		if s.Progress() < need {
			return false, nil
		}
		j = judgement{settled: map[string]bool{}, progress: s.Progress()}
		var pending []v1beta1.Reservation
		for i := range led.Spec.Reservations {
			r := &led.Spec.Reservations[i]
			switch {
			case r.Review == string(w.UID):
				j.already = true
			case s.Settled(r):
				j.settled[r.Review] = true
			case l.expired(r):
			case r.Node == w.Name && (state.Standing(r) || r.Operation != "CREATE" && r.Base != "" && r.Base == w.Base):
				// w lands only on the version it was judged on, which the
				// state holds: of the writes judged on that version, and
				// those a standing reservation stands for, at most one
				// lands before w, and w then fails.
			case s.Covered(r):
			default:
				pending = append(pending, *r)
			}
		}
		related = s.Related(w.Name, w.Spec, pending)
		if slices.ContainsFunc(related, settles) && l.Now().Before(patience) {
			return false, nil
		}
		j.verdict = verdictOf(s.Admit(w.Name, w.Spec))
		if j.verdict.Allowed && len(related) > 0 && len(related) <= state.MaxUncertain {
			snap.tree, snap.marks, snap.flavors = s.Tree(), s.Marks(), s.FlavorNames()
			cfg = s.Config()
		}
		return true, nil
	})
	if err != nil {
		return j, err
	}
	if !j.verdict.Allowed || len(related) == 0 {
		return j, nil
	}
	if l.Metrics != nil {
		l.Metrics.WebhookUncertain.Inc()
	}
	if len(related) > state.MaxUncertain {
		return j, fmt.Errorf("%d writes near %s, admitted moments ago, have not been seen to land yet (%s)", len(related), w.Name, describe(related))
	}
	// The snapshot is judged outside the reducer's lock.
	if a, ok := state.AdmitUncertain(snap.tree, snap.marks, snap.flavors, cfg, w.Name, w.Spec, related); !ok {
		return j, fmt.Errorf("%s, if the writes admitted moments ago and not yet seen to land (%s) land", a.Message, describe(related))
	}
	return j, nil
}

// settles: the reservation is not a standing one, which settles only when
// its object goes away.
func settles(r v1beta1.Reservation) bool { return !state.Standing(&r) }

// describe names reservations for a refusal: "CREATE team-a by replica-1".
func describe(rs []v1beta1.Reservation) string {
	out := make([]string, 0, len(rs))
	for i, r := range rs {
		if i == state.MaxListed {
			out = append(out, fmt.Sprintf("and %d more", len(rs)-i))
			break
		}
		out = append(out, fmt.Sprintf("%s %s by %s", r.Operation, r.Node, r.Replica))
	}
	return strings.Join(out, ", ")
}

// reserve writes the ledger with w's reservation added and the settled and
// expired ones removed, on the condition that it is still at led's
// resourceVersion.
func (l *Ledger) reserve(ctx context.Context, led *v1beta1.AdmissionLedger, w Write, j judgement) (*v1beta1.AdmissionLedger, error) {
	l.mu.Lock()
	fenced, why := l.fencedUntil.Sub(l.Now()), l.fenceReason
	l.mu.Unlock()
	if fenced > 0 {
		return nil, fmt.Errorf("%s; retry in %s", why, fenced.Round(time.Second))
	}
	next := l.pruned(led, j.settled, j.progress)
	keep := next.Spec.Reservations
	if len(keep) >= maxReservations {
		return nil, fmt.Errorf("the admission ledger %s holds %d reservations not yet seen to land, its most", l.Name, len(keep))
	}
	written := l.Now()
	r := v1beta1.Reservation{Review: string(w.UID), Node: w.Name, Operation: string(w.Op), UID: w.ObjectUID,
		Base: w.Base, Replica: l.Identity, AdmittedAt: metav1.NewTime(written.UTC().Truncate(time.Second))}
	if w.Spec != nil {
		r.Spec = w.Spec.DeepCopy()
	}
	// An update of a team's budgets that keeps it where it is stands for
	// this replica's later writes within it too; one gone stale is renewed
	// under the new review's uid, which every replica then sees anew.
	l.mu.Lock()
	renew := l.standingFor(w) // too old to admit w (stand): renewed
	if renew != nil {
		renew.used = written // not released while it is renewed
	}
	l.mu.Unlock()
	stand := renew != nil || w.Op == admissionv1.Update && w.Base != "" && state.SameSeat(w.Name, w.Old, w.Spec)
	if renew != nil {
		r.Spec, r.Since = renew.spec.DeepCopy(), renew.since
		keep = slices.DeleteFunc(keep, func(o v1beta1.Reservation) bool { return o.Review == renew.review })
	} else if stand {
		r.Since = w.Base
	}
	if stand {
		r.Base = ""
	}
	next.Spec.Reservations = append(keep, r)
	next.Spec.ReservationCount = int32(len(next.Spec.Reservations))
	out, err := l.Client.Update(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil || !stand {
		return out, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := renew
	if st == nil {
		st = &standing{node: w.Name, uid: w.ObjectUID, since: r.Since, spec: r.Spec}
		l.standing = append(l.standing, st)
	}
	st.review, st.written, st.used = r.Review, written, written
	st.writes = append(st.writes, written1(w))
	return out, nil
}

// pruned is a copy of led without the reservations settled names, whose
// removal raises the floor to progress (the view that saw them settle),
// and without those this replica has seen expire.
func (l *Ledger) pruned(led *v1beta1.AdmissionLedger, settled map[string]bool, progress uint64) *v1beta1.AdmissionLedger {
	next := led.DeepCopy()
	removed := false
	next.Spec.Reservations = slices.DeleteFunc(next.Spec.Reservations, func(r v1beta1.Reservation) bool {
		removed = removed || settled[r.Review]
		return settled[r.Review] || l.expired(&r)
	})
	if removed && progress > parseVersion(next.Spec.Floor) {
		next.Spec.Floor = strconv.FormatUint(progress, 10)
	}
	next.Spec.ReservationCount = int32(len(next.Spec.Reservations))
	return next
}

// written1 is what a write under a standing reservation leaves to settle:
// an UPDATE judged on its base.
func written1(w Write) v1beta1.Reservation {
	return v1beta1.Reservation{Node: w.Name, Operation: "UPDATE", UID: w.ObjectUID, Base: w.Base}
}

// stand admits w, without writing the ledger, when this replica's
// standing reservation for it (standingFor) is fresh and listed in led,
// on which w was judged.
func (l *Ledger) stand(led *v1beta1.AdmissionLedger, w Write) bool {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.standingFor(w)
	if st == nil || now.Before(l.fencedUntil) || now.Sub(st.written) >= reuse || !listed(led, st.review) {
		return false
	}
	st.used = now
	st.writes = append(st.writes, written1(w))
	return true
}

// standingFor is the newest of this replica's standing reservations that
// is of w's object, not being released, and that w is within; nil when
// there is none. The caller holds l.mu.
func (l *Ledger) standingFor(w Write) *standing {
	if w.Op != admissionv1.Update || w.Base == "" {
		return nil
	}
	for _, st := range slices.Backward(l.standing) {
		if st.node == w.Name && st.uid == w.ObjectUID && !st.releasing && state.Within(w.Name, st.spec, w.Spec) {
			return st
		}
	}
	return nil
}

func listed(led *v1beta1.AdmissionLedger, review string) bool {
	return slices.ContainsFunc(led.Spec.Reservations, func(r v1beta1.Reservation) bool { return r.Review == review })
}

// release removes from the ledger this replica's standing reservations
// that no write used for Hold and whose writes all settled, raising the
// floor to the view that saw them settle; it forgets those the ledger no
// longer lists or that expired.
func (l *Ledger) release(ctx context.Context) error {
	now := l.Now()
	l.mu.Lock()
	idle := map[string][]v1beta1.Reservation{} // by review, the writes
	for _, st := range l.standing {
		if !st.releasing && now.Sub(st.used) > l.Hold {
			st.releasing = true
			idle[st.review] = slices.Clone(st.writes)
		}
	}
	l.mu.Unlock()
	if len(idle) == 0 {
		return nil
	}
	led, err := l.read(ctx, false)
	drop := map[string]bool{}
	settled := map[string]bool{}
	var progress uint64
	if err == nil {
		l.State.Observe(func(s *state.State) {
			progress = s.Progress()
			for review, writes := range idle {
				i := slices.IndexFunc(led.Spec.Reservations, func(r v1beta1.Reservation) bool { return r.Review == review })
				if i < 0 || l.expired(&led.Spec.Reservations[i]) {
					drop[review] = true
				} else if !slices.ContainsFunc(writes, func(r v1beta1.Reservation) bool { return !s.Settled(&r) }) {
					drop[review], settled[review] = true, true
				}
			}
		})
	}
	if len(settled) > 0 {
		next := l.pruned(led, settled, progress)
		var out *v1beta1.AdmissionLedger
		if out, err = l.Client.Update(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager}); err == nil {
			l.keep(out)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.standing = slices.DeleteFunc(l.standing, func(st *standing) bool {
		st.releasing = false
		return drop[st.review] && (err == nil || !settled[st.review])
	})
	return err
}

// maxReservations is the CRD's bound on the ledger's list.
const maxReservations = 256

// expired reports whether this replica first saw r longer than Expiry ago.
func (l *Ledger) expired(r *v1beta1.Reservation) bool {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	first, ok := l.seen[r.Review]
	if !ok {
		l.seen[r.Review] = now
		return false
	}
	return now.Sub(first) > l.Expiry
}

// await calls done under the state's lock after each event until it
// reports true, and once more at recheck. It ends with an error that says
// to retry when ctx ends first.
func (l *Ledger) await(ctx context.Context, recheck time.Time, done func(*state.State) (bool, error)) error {
	for {
		var ok bool
		var err error
		next := l.State.Observe(func(s *state.State) { ok, err = done(s) })
		if ok || err != nil {
			return err
		}
		var timer <-chan time.Time
		var t *time.Timer
		if left := recheck.Sub(l.Now()); left > 0 {
			t = time.NewTimer(left)
			timer = t.C
		}
		select {
		case <-next:
		case <-timer:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return errors.New("this replica's view of the tree has not caught up with the writes admitted before this one")
		}
	}
}

// read returns the ledger as last seen, or reads it when force is set or
// nothing is cached; it creates the ledger when it does not exist.
func (l *Ledger) read(ctx context.Context, force bool) (*v1beta1.AdmissionLedger, error) {
	l.mu.Lock()
	cur := l.cur
	l.mu.Unlock()
	if cur != nil && !force {
		return cur, nil
	}
	led, err := l.Client.Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		led, err = l.Client.Create(ctx, &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name,
			Labels: map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}}}, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			led, err = l.Client.Get(ctx, l.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the admission ledger %s: %w", l.Name, err)
	}
	l.keep(led)
	return led, nil
}

// keep caches led unless a newer one is cached (resourceVersions compared
// as numbers: a stale cache costs a conflict, never a wrong admission).
func (l *Ledger) keep(led *v1beta1.AdmissionLedger) {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil && l.cur.UID == led.UID && parseVersion(led.ResourceVersion) <= parseVersion(l.cur.ResourceVersion) {
		return
	}
	l.cur = led
	live := make(map[string]time.Time, len(led.Spec.Reservations))
	for _, r := range led.Spec.Reservations {
		first, ok := l.seen[r.Review]
		if !ok {
			first = now
		}
		live[r.Review] = first
	}
	l.seen = live
}

// Run keeps the cached ledger current with a watch on the one object, so
// that a replica judges with the reservations of the others without
// reading the ledger, until ctx is done.
func (l *Ledger) Run(ctx context.Context) {
	sel := fields.OneTermEqualSelector("metadata.name", l.Name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return l.Client.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return l.Client.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1beta1.AdmissionLedger{}, 0, cache.Indexers{})
	seen := func(obj any) {
		if led, ok := obj.(*v1beta1.AdmissionLedger); ok {
			l.keep(led)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.cur = nil
			if led, ok := obj.(*v1beta1.AdmissionLedger); !ok || len(led.Spec.Reservations) > 0 {
				// Its reservations went with it: reserve nothing until
				// they would have expired.
				l.fencedUntil = l.Now().Add(l.Expiry)
				l.fenceReason = fmt.Sprintf("the admission ledger %s was deleted with reservations in it, which may still land", l.Name)
			}
		},
	})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := l.release(ctx); err != nil {
				klog.FromContext(ctx).V(2).Info("releasing standing reservations", "err", err)
			}
		}
	}()
	inf.Run(ctx.Done())
}

// parseVersion reads a resourceVersion as the informers' events do.
func parseVersion(rv string) uint64 { return sources.ResourceVersion(rv) }
