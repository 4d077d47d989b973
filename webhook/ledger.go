package webhook

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// Bounds of the ledger: how often one review judges again after losing the
// compare-and-swap to another admission (each loss is another write's
// success; the review's deadline bounds it too), and the CRD's bound on
// the list.
const (
	maxAttempts     = 64
	maxReservations = 256
	// maxLedgerBytes bounds the ledger's reservations, encoded, well
	// below etcd's bound on one object (1.5 MiB by default): specs can
	// carry thousands of perCluster shares.
	maxLedgerBytes = 1 << 20
)

// patience is how long a review waits for related reservations to settle
// before it judges with them uncertain. It is not a safety bound: an
// unsettled reservation is counted either way.
const patience = time.Second

// Ledger judges tree writes on the manager's state plus the reservations
// of the AdmissionLedger, and reserves each admitted write there with a
// compare-and-swap, so that every replica's later judgement counts it
// until its state shows the write landed.
type Ledger struct {
	Client typed.AdmissionLedgerInterface
	// Watch lists and watches the one ledger object (Run).
	Watch cache.ListerWatcher
	Name  string
	State StateReader
	// Identity names this replica in the reservations it writes.
	Identity string
	// Expiry is how long, after this replica first saw it, a reservation
	// that its state cannot settle is counted: longer than the API
	// server's --request-timeout, which ends every write that was admitted
	// and has not landed.
	Expiry time.Duration
	// Reuse bounds how long after it was written a standing reservation
	// admits writes (the webhook's timeout): each of them lands, if ever,
	// within the API server's --request-timeout, so every replica counts
	// the reservation until the last of them can no longer land as long
	// as Expiry is at least that timeout plus Reuse (Options.Validate).
	Reuse time.Duration
	// Hold is how long a standing reservation is kept after the last write
	// it admitted. It is not a safety bound either.
	Hold time.Duration
	// Now is this replica's clock (time.Now). Only durations on it are
	// compared, never its readings with another replica's.
	Now func() time.Time
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Objects reads an AcceleratorQuota from the API server, to check the
	// version a review was judged on (storedBase), and Reads reads the
	// ledger there when a review must see it as it is now (fresh): clients
	// of their own, so that forged reviews, which cost such reads, do not
	// spend the rate of the client that writes reservations. Reads nil:
	// Client reads.
	Objects ObjectReader
	Reads   typed.AdmissionLedgerInterface
	// Waiting holds a token for each review that waits, for this replica's
	// view or for related reservations to settle: with it full, a review
	// does not wait (enter). nil: no bound.
	Waiting chan struct{}

	mu  sync.Mutex
	cur *v1beta1.AdmissionLedger
	// turn orders this replica's writes of the ledger (reserveInTurn).
	turn sync.Mutex
	// seen is when this replica first saw each reservation, by review uid.
	seen map[string]time.Time
	// fencedUntil: until then nothing is reserved, for fenceReason: the
	// ledger was deleted with reservations in it, or replaced.
	fencedUntil time.Time
	fenceReason string
	// gone are the uids of ledgers seen deleted or replaced: a late
	// answer that carries one is not cached again.
	gone map[types.UID]bool
	// sizes are the encoded sizes of reservations, by review uid.
	sizes map[string]int
	// standing are this replica's standing reservations, newest last.
	standing []*standing
	// parsed are the specs of standing reservations, parsed once, by
	// review uid (standingSpecs).
	parsed map[string]state.Parsed

	freshMu   sync.Mutex
	freshCall *readCall
}

// ObjectReader reads one AcceleratorQuota (the typed client's Get).
type ObjectReader interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1beta1.AcceleratorQuota, error)
}

// readCall is one read of the ledger at the API server that reviews share
// (fresh).
type readCall struct {
	start time.Time
	done  chan struct{}
	led   *v1beta1.AdmissionLedger
	err   error
}

// standing is one of this replica's standing reservations: while it is
// fresh (written less than Reuse ago), a later write of its object within
// its spec (state.Within) is admitted without writing the ledger. It is
// removed once no write has used it for Hold and every write it stood for
// has settled: they are updates of one object, so once the one judged on
// the newest base (last) has settled, all have (State.Settled).
type standing struct {
	review, node, uid, since string
	spec                     *v1beta1.AcceleratorQuotaSpec
	written, used            time.Time // written: before the Update that wrote it
	releasing                bool
	last                     v1beta1.Reservation
}

// Judge decides a tree write (Reviewer.Judge). It waits until the state
// has seen at least the ledger's floor and the object the write was judged
// on, and for related reservations to settle (at most patience), judges on
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
		klog.FromContext(ctx).V(2).Info("judged", "uid", w.UID, "node", w.Name, "op", w.Op, "base", w.Base,
			"allowed", v.Allowed, "failed", err != nil, "outcome", outcome, "total", l.Now().Sub(start))
	}()
	led, err := l.read(ctx, false)
	if err == nil {
		err = l.storedBase(ctx, w)
	}
	// The write's specs are parsed here, once: under the reducer's lock
	// only the state's are compared with them.
	pw, po := state.Parse(w.Name, w.Spec), state.Parse(w.Name, w.Old)
	fresh := false
	for attempt := 0; err == nil && attempt < maxAttempts; attempt++ {
		if ctx.Err() != nil {
			outcome = "unavailable"
			return Verdict{}, fmt.Errorf("the admission ledger %s changed %d times while this write was judged, until its time was up", l.Name, attempt)
		}
		var j judgement
		if j, err = l.judgeOn(ctx, start, led, w, pw, po); err != nil {
			break
		}
		if !j.verdict.Allowed && !j.lowering && !fresh {
			// A denial stands only against the ledger as it is now: the
			// cached one may lack a reservation made a moment ago on
			// another replica (a parent created just before its child).
			fresh = true
			cur, err := l.fresh(ctx, start)
			if err != nil {
				outcome = "unavailable"
				return Verdict{}, err
			}
			if cur.ResourceVersion != led.ResourceVersion {
				led = cur
				continue
			}
		}
		switch {
		case j.lowering:
			outcome = "lowering"
		case !j.verdict.Allowed:
		case j.already:
			outcome = "already"
		case w.DryRun:
			outcome = "dry-run"
		case l.stand(led, w):
			outcome = "standing"
		default:
			var next *v1beta1.AdmissionLedger
			if next, err = l.reserveInTurn(ctx, led, w, j); errors.Is(err, errStale) {
				// A review of this replica reserved meanwhile: judge
				// again on the ledger it wrote, with no call. It does
				// not count as an attempt: each is another review's
				// reservation, and the deadline bounds them.
				attempt--
				led, err = l.read(ctx, false)
				continue
			}
			if apierrors.IsConflict(err) {
				if l.Metrics != nil {
					l.Metrics.WebhookLedger.WithLabelValues("conflict").Inc()
				}
				fresh = true
				led, err = l.fresh(ctx, l.Now())
				continue
			}
			if err != nil {
				outcome = "failed"
				return Verdict{}, err
			}
			l.keep(next)
			outcome = "reserved"
		}
		return j.verdict, nil
	}
	outcome = "unavailable"
	if err == nil {
		err = fmt.Errorf("the admission ledger %s changed %d times while this write was judged", l.Name, maxAttempts)
	}
	return Verdict{}, err
}

// storedBase refuses a write judged on a version of its object that the
// API server has not stored: the review waits for its state to reach the
// base, and a forged review could name one ahead of the state, to hold
// its slot until its deadline. A base the state has seen passes at once;
// a later one is checked against the object as the API server holds it
// now (a consistent read of that one object): a genuine review's base is
// the object's version when the API server judged it, so the object holds
// that version or a later one, with the review's uid. Then the wait is
// the informer's lag, and bounded by the review's own deadline either way.
func (l *Ledger) storedBase(ctx context.Context, w Write) error {
	base := parseVersion(w.Base)
	if base == 0 || l.Objects == nil {
		return nil
	}
	var seen uint64
	l.State.Observe(func(s *state.State) { seen = s.Horizon() })
	if base <= seen {
		return nil
	}
	// A wait too, on the API server: it takes a waiting slot.
	if !l.enter(waitBase) {
		return fmt.Errorf("the review of %s names a version this replica has not seen yet, and %d reviews wait already", w.Name, cap(l.Waiting))
	}
	defer l.leave()
	aq, err := l.Objects.Get(ctx, w.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the review of %s names its resourceVersion %d, but the API server holds no %s: it sends no such review", w.Name, base, w.Name)
	case err != nil:
		return fmt.Errorf("reading %s to check the version the write was judged on: %w", w.Name, err)
	case string(aq.UID) != w.ObjectUID:
		return fmt.Errorf("the review of %s names the object with uid %s, but the API server holds %s with uid %s: it sends no such review",
			w.Name, clip(w.ObjectUID), w.Name, aq.UID)
	}
	if stored := parseVersion(aq.ResourceVersion); base > stored {
		return fmt.Errorf("the review of %s names its resourceVersion %d, which the API server has not stored (%s is at %d): it sends no such review",
			w.Name, base, w.Name, stored)
	}
	return nil
}

// judgement is what one look at the state found.
type judgement struct {
	verdict Verdict
	// settled are the reservations this replica's state shows settled,
	// progress the highest version it had applied then (its Horizon): the
	// floor once they are removed.
	settled  map[string]bool
	progress uint64
	// already: the ledger holds this review's reservation; lowering: the
	// write lowers a team's budgets, which cannot make another write's
	// verdict wrong, whatever else lands, and needs no reservation.
	already, lowering bool
	// snap is what the combinations of related reservations are judged
	// on.
	snap *uncertainInputs
}

func (l *Ledger) judgeOn(ctx context.Context, start time.Time, led *v1beta1.AdmissionLedger, w Write, pw, po state.Parsed) (judgement, error) {
	need := max(parseVersion(led.Spec.Floor), parseVersion(w.Base))
	recheck := start.Add(patience)
	held := false
	defer func() {
		if held {
			l.leave()
		}
	}()
	for first := true; ; first = false {
		j, related, next, err := l.look(ctx, recheck, need, led, w, pw, po)
		if err != nil || j.lowering || len(related) == 0 {
			return j, err
		}
		// Waiting helps only while a related reservation may still
		// settle, and only a write not admitted on every outcome of the
		// related reservations needs it: one admitted on all of them
		// is answered at once, however long they take to land, or if
		// they never do. The combinations, O(tree) each, are judged on
		// the first look and on the last. A review waits only with a
		// waiting slot: without one it is answered on the first look.
		waiting := slices.ContainsFunc(related, settles) && l.Now().Before(recheck)
		if first || !waiting {
			var uncertain error
			if j.verdict.Allowed {
				uncertain = l.uncertain(w, related, j.snap)
			}
			if !waiting || (j.verdict.Allowed && uncertain == nil) || !held && !l.enter(waitSettle) {
				if j.verdict.Allowed && l.Metrics != nil {
					l.Metrics.WebhookUncertain.Inc()
				}
				return j, uncertain
			}
			held = true
		}
		if err := l.sleep(ctx, recheck, next); err != nil {
			return j, err
		}
	}
}

// What a review waits for, where a caller could make it wait (the waits
// metric's "for"): the API server's answer on a base this replica has
// not seen, related reservations to settle.
const (
	waitBase   = "base"
	waitSettle = "settle"
)

// enter takes a waiting slot for a review about to wait for what, and
// reports false, counting it, when they are all taken: then the review
// does not wait. leave gives the slot back.
func (l *Ledger) enter(what string) bool {
	if l.Waiting == nil {
		return true
	}
	select {
	case l.Waiting <- struct{}{}:
		if l.Metrics != nil {
			l.Metrics.WebhookWaits.WithLabelValues(what, "waited").Inc()
			l.Metrics.WebhookWaiting.Inc()
		}
		return true
	default:
		if l.Metrics != nil {
			l.Metrics.WebhookWaits.WithLabelValues(what, "full").Inc()
		}
		return false
	}
}

func (l *Ledger) leave() {
	if l.Waiting == nil {
		return
	}
	<-l.Waiting
	if l.Metrics != nil {
		l.Metrics.WebhookWaiting.Dec()
	}
}

// uncertain judges w on every combination of the related reservations
// landing, on the snapshot, outside the reducer's lock; nil when each
// admits it. Up to MaxUncertain it tries each combination; beyond, it
// judges on the bound of those of nodes nothing names, with every
// combination of at most MaxUncertain others (state.AdmitDominated).
func (l *Ledger) uncertain(w Write, related []v1beta1.Reservation, snap *uncertainInputs) error {
	var a state.Admission
	ok := false
	switch {
	case snap == nil:
	case len(related) <= state.MaxUncertain:
		a, ok = state.AdmitUncertain(snap.tree.Tree(), snap.marks, snap.flavors, snap.cfg, w.Name, w.Spec, related)
	default:
		a, ok = state.AdmitDominated(snap.tree.Tree(), snap.marks, snap.flavors, snap.cfg, w.Name, w.Spec, related)
		if l.Metrics != nil {
			l.Metrics.WebhookBound.WithLabelValues(boundOutcome(a, ok)).Inc()
		}
	}
	switch {
	case ok:
		return nil
	case a.Message == "":
		return fmt.Errorf("%d writes near %s, admitted moments ago, have not been seen to land yet (%s)", len(related), w.Name, describe(related))
	default:
		return fmt.Errorf("%s, if the writes admitted moments ago and not yet seen to land (%s) land", a.Message, describe(related))
	}
}

// boundOutcome labels an AdmitDominated answer for the bound metric.
func boundOutcome(a state.Admission, ok bool) string {
	switch {
	case ok:
		return "admitted"
	case a.Message != "":
		return "refused"
	}
	return "unbounded"
}

// uncertainInputs are what AdmitUncertain reads of the state, taken
// under the reducer's lock in O(1) but for the small maps.
type uncertainInputs struct {
	tree    state.TreeSnapshot
	marks   map[state.Pair]state.Amount
	flavors map[string]bool
	cfg     events.Config
}

// sleep waits for next (the next applied event), recheck or ctx's end.
func (l *Ledger) sleep(ctx context.Context, recheck time.Time, next <-chan struct{}) error {
	var timer <-chan time.Time
	if left := recheck.Sub(l.Now()); left > 0 {
		timer = time.After(left)
	}
	select {
	case <-next:
	case <-timer:
	case <-ctx.Done():
		return errors.New("this replica's view of the tree has not caught up with the writes admitted before this one")
	}
	return nil
}

// look takes one look at the state, once it has reached need: the verdict
// on the state alone, and the reservations of led that can change it.
func (l *Ledger) look(ctx context.Context, recheck time.Time, need uint64, led *v1beta1.AdmissionLedger, w Write, pw, po state.Parsed) (judgement, []v1beta1.Reservation, <-chan struct{}, error) {
	var j judgement
	var related []v1beta1.Reservation
	parsed := l.standingSpecs(led)
	never := false
	next, err := l.await(ctx, recheck, func(s *state.State) bool {
		if s.Progress() < need {
			return false
		}
		if never = s.NeverAt(w.Name, w.ObjectUID, parseVersion(w.Base)); never {
			return true
		}
		j = judgement{settled: map[string]bool{}, progress: s.Horizon()}
		if w.Old != nil {
			var a state.Admission
			if a, j.lowering = s.AdmitLoweringParsed(po, pw); j.lowering {
				j.verdict = verdictOf(a)
				return true
			}
		}
		if w.Spec == nil && len(w.Name) > v1beta1.MaxNameLength {
			// A node whose name the ledger cannot hold (stored while the
			// CRD lacked its rule on names) has no children and can have
			// none: a parentRef holds no longer name. Its deletion only
			// lowers its parent's children's total, as a lowering does,
			// and needs no reservation either.
			j.verdict, j.lowering = verdictOf(s.AdmitParsed(pw)), true
			return true
		}
		var pending []v1beta1.Reservation
		for _, r := range led.Spec.Reservations {
			switch {
			case r.Review == string(w.UID):
				j.already = true
			case s.Settled(&r):
				j.settled[r.Review] = true
			case l.expired(&r):
			case r.Node == w.Name && (state.Standing(&r) || r.Operation != "CREATE" && r.Base != "" && r.Base == w.Base):
				// w lands only on the version it was judged on, which the
				// state holds: of the writes judged on that version, and
				// those a standing reservation stands for, at most one
				// lands before w, and w then fails.
			case state.Standing(&r) && s.CoveredBy(&r, parsed[r.Review]):
			default:
				pending = append(pending, r)
			}
		}
		related = s.Related(w.Name, w.Spec, pending)
		j.verdict = verdictOf(s.AdmitParsed(pw))
		if j.verdict.Allowed && len(related) > 0 {
			j.snap = &uncertainInputs{s.TreeSnapshot(), s.Marks(), s.FlavorNames(), s.Config()}
		}
		return true
	})
	if err == nil && never {
		err = fmt.Errorf("the review of %s names its resourceVersion %s, which this replica has seen pass without %s ever being at it: the API server sends no such review", w.Name, w.Base, w.Name)
	}
	return j, related, next, err
}

// standingSpecs are the specs of led's standing reservations, parsed,
// by review uid: each is parsed once, when a review first meets it, not
// under the reducer's lock on every look.
func (l *Ledger) standingSpecs(led *v1beta1.AdmissionLedger) map[string]state.Parsed {
	out := map[string]state.Parsed{}
	for i := range led.Spec.Reservations {
		r := &led.Spec.Reservations[i]
		if !state.Standing(r) || r.Spec == nil {
			continue
		}
		l.mu.Lock()
		p, ok := l.parsed[r.Review]
		l.mu.Unlock()
		if !ok || p.Name() != r.Node {
			p = state.Parse(r.Node, r.Spec)
			l.mu.Lock()
			if l.parsed == nil {
				l.parsed = map[string]state.Parsed{}
			}
			l.parsed[r.Review] = p
			l.mu.Unlock()
		}
		out[r.Review] = p
	}
	return out
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
	written := l.Now()
	l.mu.Lock()
	fenced, why := l.fencedUntil.Sub(written), l.fenceReason
	l.mu.Unlock()
	if fenced > 0 {
		return nil, fmt.Errorf("%s; retry in %s", why, fenced.Round(time.Second))
	}
	next := l.pruned(led, j.settled, j.progress)
	if len(next.Spec.Reservations) >= maxReservations {
		return nil, fmt.Errorf("the admission ledger %s holds %d reservations not yet seen to land, its most", l.Name, len(next.Spec.Reservations))
	}
	r := v1beta1.Reservation{Review: string(w.UID), Node: w.Name, Operation: string(w.Op), UID: w.ObjectUID,
		Base: w.Base, Replica: l.Identity, AdmittedAt: metav1.NewTime(written.UTC().Truncate(time.Second))}
	if w.Spec != nil {
		r.Spec = w.Spec.DeepCopy()
	}
	// An update of a team's budgets that keeps it where it is stands for
	// this replica's later writes within it too (stand), from the version
	// it was judged on.
	stand := w.Op == admissionv1.Update && w.Base != "" && state.SameSeat(w.Name, w.Old, w.Spec)
	if stand {
		r.Since, r.Base = w.Base, ""
	}
	next.Spec.Reservations = append(next.Spec.Reservations, r)
	next.Spec.ReservationCount = int32(len(next.Spec.Reservations))
	if n := l.bytesOf(next.Spec.Reservations); n > maxLedgerBytes {
		return nil, fmt.Errorf("the admission ledger %s would hold %d bytes of reservations not yet seen to land, more than its bound of %d bytes (large specs: many perCluster shares)", l.Name, n, maxLedgerBytes)
	}
	out, err := l.Client.Update(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil || !stand {
		return out, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.standing = append(l.standing, &standing{review: r.Review, node: w.Name, uid: w.ObjectUID, since: r.Since, spec: r.Spec,
		written: written, used: written, last: written1(w)})
	return out, nil
}

// errStale: the ledger changed since the review read it.
var errStale = errors.New("the admission ledger changed")

// reserveInTurn is reserve, one review of this replica at a time: a
// review judged on a ledger that another review of this replica has
// since written is judged again on the newer one, with no call, instead
// of losing the compare-and-swap at the API server. So a burst of writes
// on one replica costs one write of the ledger each, and reviews of
// different replicas still race through the compare-and-swap.
func (l *Ledger) reserveInTurn(ctx context.Context, led *v1beta1.AdmissionLedger, w Write, j judgement) (*v1beta1.AdmissionLedger, error) {
	l.turn.Lock()
	defer l.turn.Unlock()
	l.mu.Lock()
	cur := l.cur
	l.mu.Unlock()
	if cur != nil && cur.UID == led.UID && parseVersion(cur.ResourceVersion) > parseVersion(led.ResourceVersion) {
		return nil, errStale
	}
	next, err := l.reserve(ctx, led, w, j)
	if err == nil {
		l.keep(next)
	}
	return next, err
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

// bytesOf is the encoded size of rs, each reservation encoded once and
// its size kept while the cached ledger lists it.
func (l *Ledger) bytesOf(rs []v1beta1.Reservation) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sizes == nil {
		l.sizes = map[string]int{}
	}
	total := 0
	for i := range rs {
		n, ok := l.sizes[rs[i].Review]
		if !ok {
			b, err := json.Marshal(&rs[i])
			if err != nil {
				return maxLedgerBytes + 1
			}
			n = len(b) + 1
			l.sizes[rs[i].Review] = n
		}
		total += n
	}
	return total
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
	if st == nil || now.Before(l.fencedUntil) || now.Sub(st.written) >= l.Reuse ||
		!slices.ContainsFunc(led.Spec.Reservations, func(r v1beta1.Reservation) bool { return r.Review == st.review }) {
		return false
	}
	st.used = now
	if parseVersion(w.Base) > parseVersion(st.last.Base) {
		st.last = written1(w)
	}
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

// release removes from the ledger this replica's standing reservations
// that no write used for Hold and whose writes all settled, raising the
// floor to the view that saw them settle; it forgets those the ledger no
// longer lists or that expired.
func (l *Ledger) release(ctx context.Context) error {
	now := l.Now()
	l.mu.Lock()
	idle := map[string]v1beta1.Reservation{} // by review, the last write
	for _, st := range l.standing {
		if !st.releasing && now.Sub(st.used) > l.Hold {
			st.releasing = true
			idle[st.review] = st.last
		}
	}
	l.mu.Unlock()
	if len(idle) == 0 {
		return nil
	}
	led, err := l.read(ctx, false)
	drop, settled := map[string]bool{}, map[string]bool{}
	var progress uint64
	if err == nil {
		l.State.Observe(func(s *state.State) {
			progress = s.Horizon()
			for review, last := range idle {
				i := slices.IndexFunc(led.Spec.Reservations, func(r v1beta1.Reservation) bool { return r.Review == review })
				if i < 0 || l.expired(&led.Spec.Reservations[i]) {
					drop[review] = true
				} else if s.Settled(&last) {
					drop[review], settled[review] = true, true
				}
			}
		})
	}
	if len(settled) > 0 {
		var out *v1beta1.AdmissionLedger
		if out, err = l.Client.Update(ctx, l.pruned(led, settled, progress), metav1.UpdateOptions{FieldManager: FieldManager}); err == nil {
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

// expired reports whether this replica first saw r longer than Expiry ago.
func (l *Ledger) expired(r *v1beta1.Reservation) bool {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	first, ok := l.seen[r.Review]
	if !ok {
		l.seen[r.Review] = now
	}
	return ok && now.Sub(first) > l.Expiry
}

// await calls done under the state's lock after each event until it
// reports true, and once more at recheck, and returns the channel closed
// by the event after the look that did. It ends with an error that says
// to retry when ctx ends first.
//
// What it waits for is a version the API server has stored (the ledger's
// floor, a base storedBase let through), which the informer delivers in
// the time of its lag: no caller can make it longer, so it takes no
// waiting slot.
func (l *Ledger) await(ctx context.Context, recheck time.Time, done func(*state.State) bool) (<-chan struct{}, error) {
	for {
		var ok bool
		next := l.State.Observe(func(s *state.State) { ok = done(s) })
		if ok {
			return next, nil
		}
		var timer <-chan time.Time
		if left := recheck.Sub(l.Now()); left > 0 {
			timer = time.After(left)
		}
		select {
		case <-next:
		case <-timer:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return nil, errors.New("this replica's view of the tree has not caught up with the writes admitted before this one")
		}
	}
}

// fresh returns the ledger as a read at the API server that started at
// since or later found it. A review joins a read in flight that started
// late enough, so that a burst of reviews that must see the ledger as it
// is now (denials, lost compare-and-swaps) costs one read, not one each.
func (l *Ledger) fresh(ctx context.Context, since time.Time) (*v1beta1.AdmissionLedger, error) {
	for {
		l.freshMu.Lock()
		c := l.freshCall
		if c == nil {
			c = &readCall{start: l.Now(), done: make(chan struct{})}
			l.freshCall = c
			l.freshMu.Unlock()
			c.led, c.err = l.read(ctx, true)
			l.freshMu.Lock()
			l.freshCall = nil
			l.freshMu.Unlock()
			close(c.done)
			return c.led, c.err
		}
		l.freshMu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("reading the admission ledger %s: %w", l.Name, ctx.Err())
		}
		if c.err == nil && !c.start.Before(since) {
			return c.led, nil
		}
		// It started too early for this review, or failed (on its own
		// review's deadline, perhaps): read again.
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
	reads := l.Reads
	if reads == nil {
		reads = l.Client
	}
	led, err := reads.Get(ctx, l.Name, metav1.GetOptions{})
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
// A ledger with another uid than the cached one replaced it: the cached
// one was deleted, whether or not the watch has said so yet (this
// replica's own read may have created the new one, or a relist hands it
// over as an update), and its reservations may still land, so nothing is
// reserved until they would have expired (fence).
func (l *Ledger) keep(led *v1beta1.AdmissionLedger) {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone[led.UID] {
		return
	}
	if l.cur != nil && l.cur.UID == led.UID && parseVersion(led.ResourceVersion) <= parseVersion(l.cur.ResourceVersion) {
		return
	}
	if l.cur != nil && l.cur.UID != led.UID {
		l.fence(l.cur.UID, fmt.Sprintf("the admission ledger %s was deleted and created anew, and the reservations of the old one may still land", l.Name))
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
	for review := range l.sizes {
		if _, ok := live[review]; !ok {
			delete(l.sizes, review)
		}
	}
	for review := range l.parsed {
		if _, ok := live[review]; !ok {
			delete(l.parsed, review)
		}
	}
	l.seen = live
}

// forget drops the cached ledger, deleted as obj; when it went with
// reservations in it, nothing is reserved until they would have expired.
func (l *Ledger) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	led, ok := obj.(*v1beta1.AdmissionLedger)
	if l.cur != nil && (!ok || led.UID != l.cur.UID) {
		// The cached one is gone too, or was never the one deleted: its
		// reservations are lost to this replica's judgements.
		l.fence(l.cur.UID, fmt.Sprintf("the admission ledger %s was deleted and created anew, and the reservations of the old one may still land", l.Name))
	}
	if ok {
		l.markGone(led.UID)
	}
	l.cur = nil
	if !ok || len(led.Spec.Reservations) > 0 {
		l.fence(led.UID, fmt.Sprintf("the admission ledger %s was deleted with reservations in it, which may still land", l.Name))
	}
}

// fence reserves nothing for one expiry from now, for why, and forgets
// the ledger uid for good. The caller holds l.mu.
func (l *Ledger) fence(uid types.UID, why string) {
	l.markGone(uid)
	l.fencedUntil, l.fenceReason = l.Now().Add(l.Expiry), why
}

func (l *Ledger) markGone(uid types.UID) {
	if uid == "" {
		return
	}
	if l.gone == nil {
		l.gone = map[types.UID]bool{}
	}
	l.gone[uid] = true
}

// Run keeps the cached ledger current with a watch on the one object, so
// that a replica judges with the reservations of the others without
// reading the ledger, and releases idle standing reservations each second,
// until ctx is done.
func (l *Ledger) Run(ctx context.Context) {
	inf := cache.NewSharedIndexInformer(l.Watch, &v1beta1.AdmissionLedger{}, 0, cache.Indexers{})
	seen := func(obj any) {
		if led, ok := obj.(*v1beta1.AdmissionLedger); ok {
			l.keep(led)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }, DeleteFunc: l.forget})
	go inf.Run(ctx.Done())
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
}

// parseVersion reads a resourceVersion as the informers' events do.
func parseVersion(rv string) uint64 { return sources.ResourceVersion(rv) }
