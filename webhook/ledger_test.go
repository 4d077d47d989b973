package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// fakeLedgers is one AdmissionLedger kept as the API server keeps it: a
// compare-and-swap on its resourceVersion, and the CRD's limits on what it
// lists (a node's name of at most 63 characters, at most 256
// reservations). Only Get, Create and Update are served.
type fakeLedgers struct {
	typed.AdmissionLedgerInterface
	mu      sync.Mutex
	led     *v1beta1.AdmissionLedger
	rv      int
	updates int
	// latency is how long each call takes before it is served, as on a
	// real API server.
	latency time.Duration
}

// etcdLimit is etcd's default bound on one request.
const etcdLimit = 3 << 19

var ledgerResource = schema.GroupResource{Group: "ome.io", Resource: "admissionledgers"}

func (f *fakeLedgers) Get(_ context.Context, name string, _ metav1.GetOptions) (*v1beta1.AdmissionLedger, error) {
	time.Sleep(f.latency)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.led == nil {
		return nil, apierrors.NewNotFound(ledgerResource, name)
	}
	return f.led.DeepCopy(), nil
}

func (f *fakeLedgers) Create(_ context.Context, led *v1beta1.AdmissionLedger, _ metav1.CreateOptions) (*v1beta1.AdmissionLedger, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.led != nil {
		return nil, apierrors.NewAlreadyExists(ledgerResource, led.Name)
	}
	f.rv++
	f.led = led.DeepCopy()
	f.led.UID, f.led.ResourceVersion = types.UID(fmt.Sprintf("ledger-at-%d", f.rv)), strconv.Itoa(f.rv)
	return f.led.DeepCopy(), nil
}

func (f *fakeLedgers) Update(_ context.Context, led *v1beta1.AdmissionLedger, _ metav1.UpdateOptions) (*v1beta1.AdmissionLedger, error) {
	time.Sleep(f.latency)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.led == nil {
		return nil, apierrors.NewNotFound(ledgerResource, led.Name)
	}
	if led.ResourceVersion != f.led.ResourceVersion {
		return nil, apierrors.NewConflict(ledgerResource, led.Name, fmt.Errorf("the object has been modified"))
	}
	var errs field.ErrorList
	if len(led.Spec.Reservations) > maxReservations {
		errs = append(errs, field.TooMany(field.NewPath("spec", "reservations"), len(led.Spec.Reservations), maxReservations))
	}
	for i, r := range led.Spec.Reservations {
		if len(r.Node) > 63 {
			errs = append(errs, field.TooLong(field.NewPath("spec", "reservations").Index(i).Child("node"), r.Node, 63))
		}
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "ome.io", Kind: "AdmissionLedger"}, led.Name, errs)
	}
	if b, _ := json.Marshal(led); len(b) > etcdLimit {
		return nil, apierrors.NewRequestEntityTooLargeError("etcdserver: request is too large")
	}
	f.rv++
	f.updates++
	f.led = led.DeepCopy()
	f.led.ResourceVersion = strconv.Itoa(f.rv)
	return f.led.DeepCopy(), nil
}

// fakeState is the manager's state behind the reducer's lock, fed by
// apply.
type fakeState struct {
	mu      sync.Mutex
	s       *state.State
	applied chan struct{}
}

func newFakeState(evs ...events.Event) *fakeState {
	f := &fakeState{s: state.New(), applied: make(chan struct{})}
	f.apply(evs...)
	return f
}

func (f *fakeState) apply(evs ...events.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		ev.Seq = f.s.LastSeq() + 1
		f.s.Apply(ev)
	}
	close(f.applied)
	f.applied = make(chan struct{})
}

func (f *fakeState) Observe(fn func(*state.State)) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.s)
	return f.applied
}

func (f *fakeState) Synced() bool                                       { return true }
func (f *fakeState) NotReady() error                                    { return nil }
func (f *fakeState) OnVerdict(context.Context, string, *events.Verdict) {}

var at0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// quotaAt is an AcceleratorQuota event of spec at resourceVersion rv.
func quotaAt(name, uid string, rv uint64, spec *v1beta1.AcceleratorQuotaSpec) events.Event {
	ev := events.QuotaUpserted(at0, &events.Quota{Name: name, UID: uid, Generation: 1, Spec: *spec})
	ev.Version = rv
	return ev
}

// testLedger is a Ledger of replica "r1" on st and an empty fake ledger.
func testLedger(st StateReader) (*Ledger, *fakeLedgers) {
	f := &fakeLedgers{}
	o := DefaultOptions()
	return &Ledger{Client: f, Name: "ome-quota-manager", State: st, Identity: "r1",
		Expiry: o.ReservationExpiry, Reuse: o.Timeout, Hold: o.StandingHold, Now: time.Now}, f
}

// guideEvents are the guide's tree with flavor a100, at resourceVersions
// 1 to 4.
func guideEvents() []events.Event {
	evs := []events.Event{
		events.FlavorUpserted(at0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.Synced(at0),
	}
	in := guideInputs()
	for i, name := range []string{"root", "ml-research", "team-alpha", "team-beta"} {
		evs = append(evs, quotaAt(name, "u-"+name, uint64(i+1), in.Tree[name]))
	}
	return evs
}

func TestLongNamesNeedNoLedgerField(t *testing.T) {
	long := "team-" + strings.Repeat("x", 59) // 64 characters
	spec := &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"}}
	st := newFakeState(append(guideEvents(), quotaAt(long, "u-long", 5, spec))...)
	l, f := testLedger(st)
	// A node whose name the ledger cannot hold (stored while the CRD
	// lacked its rule on names) can still be deleted: nothing can name it
	// as a parent, so its deletion only lowers its parent's total, and it
	// needs no reservation.
	v, err := l.Judge(context.Background(), Write{Name: long, Op: admissionv1.Delete, ObjectUID: "u-long", Base: "5", UID: "review-1"})
	if err != nil || !v.Allowed {
		t.Fatalf("deleting %s: %+v, %v", long, v, err)
	}
	if f.updates != 0 {
		t.Errorf("deleting %s wrote the ledger %d times", long, f.updates)
	}
}

// aTeam is a team under ml-research with n GPUs of a100.
func aTeam(n string) *v1beta1.AcceleratorQuotaSpec {
	return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"},
		Budgets: []v1beta1.Budget{{ResourceName: gpu, ResourceFlavor: "a100", Nominal: resource.MustParse(n)}}}
}

// replacedLedger is a replica r1 whose state holds ml-research (24 GPUs)
// with team-alpha (16), and whose cached ledger lists another replica's
// admitted, unsettled create of team-x (8 GPUs): a create of team-y with
// 8 more fits the state alone, and not once team-x lands.
func replacedLedger(t *testing.T) (*Ledger, *fakeLedgers) {
	t.Helper()
	in := guideInputs()
	st := newFakeState(
		events.FlavorUpserted(at0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.Synced(at0),
		quotaAt("root", "u-root", 1, in.Tree["root"]),
		quotaAt("ml-research", "u-ml", 2, in.Tree["ml-research"]),
		quotaAt("team-alpha", "u-alpha", 3, in.Tree["team-alpha"]),
	)
	l, f := testLedger(st)
	f.led = &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name, UID: "ledger-1", ResourceVersion: "1"},
		Spec: v1beta1.AdmissionLedgerSpec{ReservationCount: 1, Reservations: []v1beta1.Reservation{
			{Review: "review-x", Node: "team-x", Operation: "CREATE", UID: "u-x", Spec: aTeam("8"), Replica: "r2"}}}}
	f.rv = 1
	if _, err := l.read(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Judge(context.Background(), Write{Name: "team-y", Op: admissionv1.Create, ObjectUID: "u-y", UID: "review-y0", Spec: aTeam("8")}); err == nil {
		t.Fatalf("team-y admitted beside team-x's reservation: %+v", v)
	}
	return l, f
}

// TestReplacedLedgerFences: the ledger deleted with reservations in it
// and created anew. A replica that never saw the deletion through its
// watch still learns of it, from the new ledger's uid, whichever way the
// new ledger reaches it, and reserves nothing until the old reservations
// would have expired: they may still land.
func TestReplacedLedgerFences(t *testing.T) {
	teamY := Write{Name: "team-y", Op: admissionv1.Create, ObjectUID: "u-y", UID: "review-y", Spec: aTeam("8")}
	t.Run("created anew by this replica's own read", func(t *testing.T) {
		l, f := replacedLedger(t)
		f.mu.Lock()
		f.led = nil // deleted; the watch has not said so yet
		f.mu.Unlock()
		// A write the rules deny makes the replica read the ledger
		// afresh, which creates it anew.
		orphan := Write{Name: "team-z", Op: admissionv1.Create, ObjectUID: "u-z", UID: "review-z",
			Spec: &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "nowhere"}}}
		if v, err := l.Judge(context.Background(), orphan); err != nil || v.Allowed {
			t.Fatalf("a team under a missing parent: %+v, %v", v, err)
		}
		if f.led == nil {
			t.Fatal("the ledger was not created anew")
		}
		v, err := l.Judge(context.Background(), teamY)
		if err == nil || !strings.Contains(err.Error(), "retry") {
			t.Errorf("team-y judged on the new ledger alone: %+v, %v; want a refusal that says to retry", v, err)
		}
	})
	t.Run("seen by the watch as an update with a new uid", func(t *testing.T) {
		l, f := replacedLedger(t)
		// Deleted and created anew across a relist: the informer hands
		// it over as an update of the same key.
		f.mu.Lock()
		f.led = &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name, UID: "ledger-2", ResourceVersion: "9"}}
		f.rv = 9
		l.keep(f.led.DeepCopy())
		f.mu.Unlock()
		v, err := l.Judge(context.Background(), teamY)
		if err == nil || !strings.Contains(err.Error(), "retry") {
			t.Errorf("team-y judged on the new ledger alone: %+v, %v; want a refusal that says to retry", v, err)
		}
	})
}

// fakeObjects are the AcceleratorQuotas as the API server holds them,
// for storedBase: by name, a uid and a resourceVersion.
type fakeObjects map[string]*v1beta1.AcceleratorQuota

func (f fakeObjects) Get(_ context.Context, name string, _ metav1.GetOptions) (*v1beta1.AcceleratorQuota, error) {
	if aq, ok := f[name]; ok {
		return aq.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "ome.io", Resource: "acceleratorquotas"}, name)
}

func storedAt(uid string, rv int) *v1beta1.AcceleratorQuota {
	return &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: strconv.Itoa(rv)}}
}

// TestFutureBaseRefusedAtOnce: a review names the version its update or
// delete was judged on, and the webhook waits until its state has seen
// it. A forged review that names a version its object does not have yet
// at the API server, a uid it does not have, or an object it does not
// hold, is refused at once, not held until its deadline: its wait is
// bounded by what the API server could have sent.
func TestFutureBaseRefusedAtOnce(t *testing.T) {
	st := newFakeState(guideEvents()...)
	l, _ := testLedger(st)
	l.Objects = fakeObjects{"team-beta": storedAt("u-team-beta", 40)} // the state has seen 4
	for name, tc := range map[string]struct {
		node, uid, base, want string
	}{
		"ahead of the object":  {"team-beta", "u-team-beta", "41", "resourceVersion 41, which the API server has not stored (team-beta is at 40)"},
		"far ahead":            {"team-beta", "u-team-beta", "1000000", "resourceVersion 1000000"},
		"another life":         {"team-beta", "u-other", "30", "with uid u-other, but the API server holds team-beta with uid u-team-beta"},
		"an object not at all": {"team-gamma", "u-gamma", "30", "the API server holds no team-gamma"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			forged := Write{Name: tc.node, Op: admissionv1.Update, ObjectUID: tc.uid, Base: tc.base, UID: types.UID("forged-" + name),
				Old: guideInputs().Tree["team-beta"], Spec: aTeam("9")}
			_, err := l.Judge(ctx, forged)
			if err == nil || !strings.Contains(err.Error(), tc.want) || ctx.Err() != nil {
				t.Errorf("%v (context: %v); want a refusal saying %q, at once", err, ctx.Err(), tc.want)
			}
		})
	}
}

// blockingObjects answers each Get once release is closed, holding its
// caller meanwhile, as an API server slow to answer does.
type blockingObjects struct {
	fakeObjects
	release chan struct{}
}

func (b blockingObjects) Get(ctx context.Context, name string, o metav1.GetOptions) (*v1beta1.AcceleratorQuota, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.fakeObjects.Get(ctx, name, o)
}

// TestWaitsHoldAQuarterOfTheSlots: the waits a caller can cause take a
// waiting slot, a quarter of those in flight, so that they never hold
// every slot: a review whose base this replica has not seen asks the API
// server about it (here, slow to answer), and while the waiting slots
// are taken the next such review is refused at once with "retry"; a
// review beside reservations that may still settle, refused on one of
// their outcomes, is answered on its first look instead of waiting for
// them.
func TestWaitsHoldAQuarterOfTheSlots(t *testing.T) {
	st := newFakeState(guideEvents()...)
	l, _ := testLedger(st)
	objects := blockingObjects{fakeObjects{"team-beta": storedAt("u-team-beta", 40)}, make(chan struct{})}
	l.Objects = objects
	l.Waiting = make(chan struct{}, maxWaiting(8)) // 2 of 8
	write := func(i int) Write {
		return Write{Name: "team-beta", Op: admissionv1.Update, ObjectUID: "u-team-beta", Base: "39", UID: types.UID(fmt.Sprintf("ahead-%d", i)),
			Old: guideInputs().Tree["team-beta"], Spec: aTeam("6"), DryRun: true}
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := l.Judge(context.Background(), write(i))
			errs <- err
		}()
	}
	// Six are refused while two wait for the API server's answer.
	for range 6 {
		err := <-errs
		if err == nil || !strings.Contains(err.Error(), "2 reviews wait already") {
			t.Fatalf("a review beyond the waiting slots: %v; want a refusal at once", err)
		}
	}
	if n := len(l.Waiting); n != 2 {
		t.Fatalf("%d reviews hold a waiting slot, want 2", n)
	}
	select {
	case err := <-errs:
		t.Fatalf("a review answered while the API server had not: %v", err)
	default:
	}
	close(objects.release)
	// Each then waits for its view to reach 39, which it does once the
	// informer brings team-beta there.
	st.apply(quotaAt("team-beta", "u-team-beta", 39, guideInputs().Tree["team-beta"]))
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a review whose base the API server holds: %v; want judged", err)
		}
	}
	if n := len(l.Waiting); n != 0 {
		t.Errorf("%d waiting slots still held after every review ended", n)
	}

	// Both slots held, a create beside team-x's pending create, refused
	// where team-x lands, does not wait for it to settle.
	l2, _ := replacedLedger(t)
	l2.Waiting = make(chan struct{}, 2)
	l2.Waiting <- struct{}{}
	l2.Waiting <- struct{}{}
	stopped := time.Now()
	l2.Now = func() time.Time { return stopped } // a review that waited would wait until its deadline
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := l2.Judge(ctx, Write{Name: "team-y", Op: admissionv1.Create, ObjectUID: "u-y", UID: "review-y", Spec: aTeam("8"), DryRun: true})
	if err == nil || !strings.Contains(err.Error(), "if the writes admitted moments ago") || ctx.Err() != nil {
		t.Errorf("a create refused on one outcome, with no waiting slot: %v (context: %v); want refused at once", err, ctx.Err())
	}
}

// TestJudgeTimeoutIsTheWebhooks: a judgement ends before the API server's
// timeout for the call (the timeout it adds to the URL), and never later
// than the webhook's own, whatever a caller asks.
func TestJudgeTimeoutIsTheWebhooks(t *testing.T) {
	for q, want := range map[string]time.Duration{
		"":       8 * time.Second,
		"10s":    8 * time.Second,
		"4s":     3 * time.Second,
		"9999ms": 7999 * time.Millisecond,
		"29s":    8 * time.Second,
		"3600s":  8 * time.Second,
		"1000h":  8 * time.Second,
		"-5s":    8 * time.Second,
		"bogus":  8 * time.Second,
		"100ms":  100 * time.Millisecond,
		"1ns":    100 * time.Millisecond,
	} {
		if got := judgeTimeout(q, 10*time.Second); got != want {
			t.Errorf("judgeTimeout(%q, 10s) = %v, want %v", q, got, want)
		}
	}
}

// TestDenialsShareTheirRead: a denial is judged again on the ledger as
// the API server holds it now, which costs a read of it, up to 1 MiB. A
// burst of denials (a flood of forged reviews the rules refuse) shares
// those reads: a review joins the read in flight when it started after
// the review did.
func TestDenialsShareTheirRead(t *testing.T) {
	st := newFakeState(guideEvents()...)
	l, f := testLedger(st)
	f.latency = 50 * time.Millisecond
	counting := &countingLedgers{fakeLedgers: f}
	l.Reads = counting
	if _, err := l.read(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	counting.gets.Store(0)
	const reviews = 40
	var wg sync.WaitGroup
	for i := range reviews {
		wg.Add(1)
		go func() {
			defer wg.Done()
			big := Write{Name: fmt.Sprintf("team-big-%d", i), Op: admissionv1.Create, ObjectUID: fmt.Sprintf("u-big-%d", i),
				UID: types.UID(fmt.Sprintf("big-%d", i)), Spec: aTeam("100")}
			if v, err := l.Judge(context.Background(), big); err != nil || v.Allowed {
				t.Errorf("a create far over the Cohort: %+v, %v; want a denial", v, err)
			}
		}()
	}
	wg.Wait()
	gets := counting.gets.Load()
	t.Logf("%d denials read the ledger %d times", reviews, gets)
	if gets == 0 || gets > reviews/4 {
		t.Errorf("%d denials read the ledger %d times: want at least once, and shared", reviews, gets)
	}
}

// countingLedgers counts the reads of the ledger.
type countingLedgers struct {
	*fakeLedgers
	gets atomic.Int64
}

func (c *countingLedgers) Get(ctx context.Context, name string, o metav1.GetOptions) (*v1beta1.AdmissionLedger, error) {
	c.gets.Add(1)
	return c.fakeLedgers.Get(ctx, name, o)
}

// TestNoWaitWhenEveryOutcomeAdmits: an admitted create that never lands
// (forged, or refused later by another webhook) stays in the ledger until
// it expires. A write related to it, admitted whether it lands or not, is
// answered at once, not after waiting for it to settle. The replica's
// clock stands still here: a review that waited for it would wait until
// its caller gave up.
func TestNoWaitWhenEveryOutcomeAdmits(t *testing.T) {
	l, _ := replacedLedger(t) // team-x's create of 8, pending for ever
	stopped := time.Now()
	l.Now = func() time.Time { return stopped }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small := Write{Name: "team-y", Op: admissionv1.Create, ObjectUID: "u-y", UID: "review-y1", Spec: aTeam("0")}
	if v, err := l.Judge(ctx, small); err != nil || !v.Allowed || ctx.Err() != nil {
		t.Errorf("a create that fits beside team-x: %+v, %v (context: %v); want admitted at once", v, err, ctx.Err())
	}
}

// TestLedgerBytesBounded: a few admitted writes whose specs carry many
// perCluster shares (forged, or genuine) could grow the ledger past
// etcd's bound on one object, after which no reservation could be
// written. The ledger's size is bounded below that, with a refusal that
// says so.
func TestLedgerBytesBounded(t *testing.T) {
	big := func(n, parent string) *v1beta1.AcceleratorQuotaSpec {
		sp := &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: parent}}
		for b := range v1beta1.MaxBudgets {
			bu := v1beta1.Budget{ResourceName: fmt.Sprintf("example.com/r%02d", b), ResourceFlavor: "a100", Nominal: resource.MustParse("0")}
			for c := range v1beta1.MaxPerCluster {
				bu.PerCluster = append(bu.PerCluster, v1beta1.ClusterShare{Cluster: fmt.Sprintf("cluster-%03d-%s", c, n), Nominal: resource.MustParse("0")})
			}
			sp.Budgets = append(sp.Budgets, bu)
		}
		return sp
	}
	evs := guideEvents()
	for i := range 40 {
		co := fmt.Sprintf("co-%02d", i)
		evs = append(evs, quotaAt(co, "u-"+co, uint64(10+i), &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"}}))
	}
	st := newFakeState(evs...)
	l, _ := testLedger(st)
	ctx := context.Background()
	var err error
	for i := range 40 {
		name := fmt.Sprintf("big-%02d", i)
		var v Verdict
		if v, err = l.Judge(ctx, Write{Name: name, Op: admissionv1.Create, ObjectUID: "u-" + name, UID: types.UID("review-" + name), Spec: big(name, fmt.Sprintf("co-%02d", i))}); err != nil {
			break
		}
		if !v.Allowed {
			t.Fatalf("%s denied: %s", name, v.Message)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "bytes") || apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("the ledger grew without its own bound: %v", err)
	}
	// A small write fits in what is left, or is refused with the same
	// reason, never with etcd's.
	_, err = l.Judge(ctx, Write{Name: "small", Op: admissionv1.Create, ObjectUID: "u-small", UID: "review-small", Spec: aTeam("0")})
	if err != nil && !strings.Contains(err.Error(), "bytes") {
		t.Errorf("a small write beside a full ledger: %v", err)
	}
}

// TestBurstOfUnrelatedCreates: 50 clients create 50 teams at once, each
// under a Cohort of its own: every reservation is a
// compare-and-swap of the one ledger, on two replicas, and all must be
// admitted, none
// refused with "retry" for having lost the race too often.
func TestBurstOfUnrelatedCreates(t *testing.T) {
	const n = 50
	evs := guideEvents()
	for i := range n {
		co := fmt.Sprintf("co-%02d", i)
		evs = append(evs, quotaAt(co, "u-"+co, uint64(10+i), &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"}}))
	}
	st := newFakeState(evs...)
	l, f := testLedger(st)
	f.latency = 2 * time.Millisecond
	// A second replica on the same ledger and the same view.
	l2, _ := testLedger(st)
	l2.Client, l2.Identity = f, "r2"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range []*Ledger{l, l2} {
		if _, err := r.read(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("team-%02d", i)
			spec := aTeam("0")
			spec.ParentRef.Name = fmt.Sprintf("co-%02d", i)
			v, err := []*Ledger{l, l2}[i%2].Judge(ctx, Write{Name: name, Op: admissionv1.Create, ObjectUID: "u-" + name, UID: types.UID("review-" + name), Spec: spec})
			if err == nil && !v.Allowed {
				err = fmt.Errorf("%s denied: %s", name, v.Message)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := len(f.led.Spec.Reservations); got != n {
		t.Errorf("%d reservations, want %d", got, n)
	}
}

// TestManyPendingRaisesJudgedOnTheirBound: the other replica has admitted
// raises of six teams under one Cohort, not yet seen to land (a burst of
// GitOps syncs). A raise of a seventh team that fits even if all six land
// is admitted at once, on the one combination that bounds the others,
// though six are more than MaxUncertain; one that fits only if some do
// not land is refused, naming the overrun, once they have had their
// patience to land.
func TestManyPendingRaisesJudgedOnTheirBound(t *testing.T) {
	const teams = 10
	team := func(n int) *v1beta1.AcceleratorQuotaSpec {
		return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "co"},
			Budgets: []v1beta1.Budget{{ResourceName: gpu, ResourceFlavor: "a100", Nominal: *resource.NewQuantity(int64(n), resource.DecimalSI)}}}
	}
	in := guideInputs()
	evs := []events.Event{
		events.FlavorUpserted(at0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.Synced(at0),
		quotaAt("root", "u-root", 1, in.Tree["root"]),
		quotaAt("co", "u-co", 2, &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"},
			Budgets: []v1beta1.Budget{{ResourceName: gpu, ResourceFlavor: "a100", Nominal: resource.MustParse("100")}}}),
	}
	var pending []v1beta1.Reservation
	for i := range teams {
		name := fmt.Sprintf("t%02d", i)
		evs = append(evs, quotaAt(name, "u-"+name, uint64(10+i), team(2)))
		if i < 6 {
			pending = append(pending, v1beta1.Reservation{Review: "review-" + name, Node: name, Operation: "UPDATE",
				UID: "u-" + name, Base: fmt.Sprint(10 + i), Spec: team(6), Replica: "r2"})
		}
	}
	l, f := testLedger(newFakeState(evs...))
	f.led = &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name, UID: "ledger-1", ResourceVersion: "1"},
		Spec: v1beta1.AdmissionLedgerSpec{ReservationCount: int32(len(pending)), Reservations: pending}}
	f.rv = 1
	ctx := context.Background()
	if _, err := l.read(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The teams total 20; the six raises, landed, 44. 48 more fit in 100.
	stopped := time.Now()
	l.Now = func() time.Time { return stopped }
	quick, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := l.Judge(quick, Write{Name: "t09", Op: admissionv1.Update, ObjectUID: "u-t09", Base: "19", UID: "review-t09-a", Old: team(2), Spec: team(50)})
	if err != nil || !v.Allowed || quick.Err() != nil {
		t.Fatalf("a raise that fits beside all six: %+v, %v (context: %v); want admitted at once", v, err, quick.Err())
	}
	// 58 more fit the state alone (78), not with the raises landed (the
	// six, and t09's above: 150).
	l.Now = time.Now
	_, err = l.Judge(ctx, Write{Name: "t08", Op: admissionv1.Update, ObjectUID: "u-t08", Base: "18", UID: "review-t08-a", Old: team(2), Spec: team(60)})
	if err == nil || !strings.Contains(err.Error(), "co: budget nvidia.com/gpu on a100 is 100 but its children total") {
		t.Fatalf("a raise that fits only if some of the six do not land: %v; want refused with the overrun", err)
	}
}

// TestForgedReservationsNearACohort: four reservations that never land
// (forged: an empty Cohort's create, two teams' creates and a team's
// delete, under one Cohort) stay in the ledger until they expire. The
// Cohort's genuine writes beside them (a raise, a create, a delete, each
// fitting whether or not the four land) are each judged on the bound of
// the four and admitted at once, none refused with "retry": the
// replica's clock stands still, so a review that waited for them would
// wait until its caller gave up. The bound metric shows the path taken.
func TestForgedReservationsNearACohort(t *testing.T) {
	in := guideInputs()
	cohort := in.Tree["ml-research"].DeepCopy()
	cohort.Budgets[0].Nominal = resource.MustParse("60")
	evs := []events.Event{
		events.FlavorUpserted(at0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.Synced(at0),
		quotaAt("root", "u-root", 1, in.Tree["root"]),
		quotaAt("ml-research", "u-ml", 2, cohort),
		quotaAt("team-alpha", "u-alpha", 3, in.Tree["team-alpha"]),
		quotaAt("team-beta", "u-beta", 4, in.Tree["team-beta"]),
		quotaAt("team-gamma", "u-gamma", 5, aTeam("4")),
	}
	forged := []v1beta1.Reservation{
		{Review: "f1", Node: "ghost-cohort", Operation: "CREATE", UID: "g1", Replica: "r2",
			Spec: &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "ml-research"}}},
		{Review: "f2", Node: "ghost-1", Operation: "CREATE", UID: "g2", Replica: "r2", Spec: aTeam("6")},
		{Review: "f3", Node: "ghost-2", Operation: "CREATE", UID: "g3", Replica: "r2", Spec: aTeam("6")},
		{Review: "f4", Node: "team-gamma", Operation: "DELETE", UID: "u-gamma", Base: "5", Replica: "r2"},
	}
	l, f := testLedger(newFakeState(evs...))
	l.Metrics = metrics.New()
	f.led = &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name, UID: "ledger-1", ResourceVersion: "1"},
		Spec: v1beta1.AdmissionLedgerSpec{ReservationCount: int32(len(forged)), Reservations: forged}}
	f.rv = 1
	ctx := context.Background()
	if _, err := l.read(ctx, true); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	l.Now = func() time.Time { return stopped }
	// 16 + 8 + 4 stored, 12 forged creates: 40 of 60. Each write below
	// fits with all of them.
	for _, w := range []Write{
		{Name: "team-alpha", Op: admissionv1.Update, ObjectUID: "u-alpha", Base: "3", UID: "raise", Old: in.Tree["team-alpha"], Spec: aTeam("20")},
		{Name: "team-new", Op: admissionv1.Create, ObjectUID: "u-new", UID: "create", Spec: aTeam("6")},
		{Name: "team-beta", Op: admissionv1.Delete, ObjectUID: "u-beta", Base: "4", UID: "delete"},
		{Name: "co-new", Op: admissionv1.Create, ObjectUID: "u-co", UID: "create-cohort",
			Spec: &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "ml-research"}}},
	} {
		quick, cancel := context.WithTimeout(ctx, 30*time.Second)
		v, err := l.Judge(quick, w)
		if err != nil || !v.Allowed || quick.Err() != nil {
			t.Errorf("%s %s beside four forged reservations: %+v, %v (context: %v); want admitted at once", w.Op, w.Name, v, err, quick.Err())
		}
		cancel()
	}
	if n := promtestutil.ToFloat64(l.Metrics.WebhookBound.WithLabelValues("admitted")); n < 4 {
		t.Errorf("%v writes admitted on the bound, want 4: the path under test did not run", n)
	}
	// A create that fits the state alone, not beside the forged creates,
	// is refused with the Cohort's overrun and "if ... land", after the
	// webhook's patience on its clock, running again.
	l.Now = time.Now
	_, err := l.Judge(ctx, Write{Name: "team-big", Op: admissionv1.Create, ObjectUID: "u-big", UID: "big", Spec: aTeam("20")})
	if err == nil || !strings.Contains(err.Error(), "ml-research: budget nvidia.com/gpu on a100 is 60 but its children total") {
		t.Errorf("a create that fits only if the forged ones do not land: %v; want refused with the overrun", err)
	}
}

// TestBaseTheObjectNeverHadRefused: a review names a version its state
// has passed, but the object it names stayed at an older one meanwhile
// (a forged review that took a version of another object): the API
// server sends no such review, and it is refused at once, neither judged
// nor reserved, where before it was admitted and, as a team's update,
// reserved as a standing reservation.
func TestBaseTheObjectNeverHadRefused(t *testing.T) {
	evs := append(guideEvents(), quotaAt("team-gamma", "u-gamma", 9, aTeam("1"))) // the state has seen 9; team-beta is at 4
	l, f := testLedger(newFakeState(evs...))
	forged := Write{Name: "team-beta", Op: admissionv1.Update, ObjectUID: "u-team-beta", Base: "9", UID: "forged",
		Old: guideInputs().Tree["team-beta"], Spec: aTeam("7")}
	_, err := l.Judge(context.Background(), forged)
	if err == nil || !strings.Contains(err.Error(), "resourceVersion 9, which this replica has seen pass without team-beta ever being at it") {
		t.Fatalf("a review on a version team-beta never had: %v; want a refusal", err)
	}
	if f.updates != 0 {
		t.Errorf("the ledger was written %d times for it", f.updates)
	}
	genuine := forged
	genuine.Base, genuine.UID = "4", "genuine"
	if v, err := l.Judge(context.Background(), genuine); err != nil || !v.Allowed {
		t.Errorf("the same write on team-beta's own version: %+v, %v; want admitted", v, err)
	}
}
