package webhook

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// fakeState is the manager's StateReader over a state of the test's own:
// apply publishes one event to it.
type fakeState struct {
	mu   sync.Mutex
	st   *state.State
	next chan struct{}
	seq  uint64
}

func newFakeState(aqs ...*v1beta1.AcceleratorQuota) *fakeState {
	f := &fakeState{st: state.New(), next: make(chan struct{})}
	f.apply(events.FlavorUpserted(time.Unix(0, 0), &events.Flavor{Name: "a100"}))
	f.apply(events.QuotaUpserted(time.Unix(0, 0), &events.Quota{Name: "root", Spec: aqtest.Root().Obj().Spec, Capacity: []v1beta1.CapacityStatus{
		{ResourceName: gpu, ResourceFlavor: "a100", Allocatable: resource.MustParse("32"), HighWaterMark: resource.MustParse("32"), ObservedAt: metav1.Unix(0, 0)},
	}}))
	for _, aq := range aqs {
		f.upsert(aq)
	}
	return f
}

func (f *fakeState) apply(ev events.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	ev.Seq = f.seq
	f.st.Apply(ev)
	close(f.next)
	f.next = make(chan struct{})
}

func (f *fakeState) upsert(aq *v1beta1.AcceleratorQuota) {
	f.apply(events.QuotaUpserted(time.Unix(0, 0), &events.Quota{Name: aq.Name, Generation: aq.Generation, Spec: aq.Spec}))
}

func (f *fakeState) View(fn func(*state.State)) { f.Observe(fn) }
func (f *fakeState) Observe(fn func(*state.State)) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.st)
	return f.next
}
func (f *fakeState) Synced() bool { return true }

func TestSettled(t *testing.T) {
	team := aqtest.Team("t", "root").Budget(gpu, "a100", "1").Obj()
	team.Generation = 3
	st := newFakeState(team)
	check := func(a admitted, want bool) {
		t.Helper()
		st.View(func(s *state.State) {
			if got := a.settled(s); got != want {
				t.Errorf("%+v settled = %v, want %v", a, got, want)
			}
		})
	}
	check(admitted{Name: "t", Op: admissionv1.Create}, true)
	check(admitted{Name: "u", Op: admissionv1.Create}, false)
	check(admitted{Name: "t", Op: admissionv1.Update, Generation: 3}, false)
	check(admitted{Name: "t", Op: admissionv1.Update, Generation: 2}, true)
	check(admitted{Name: "t", Op: admissionv1.Delete, Generation: 3}, false)
	check(admitted{Name: "u", Op: admissionv1.Delete, Generation: 3}, true)

	up := func(g int64) admitted { return admitted{Name: "t", Op: admissionv1.Update, Generation: g} }
	if !up(4).covers(up(3)) || up(3).covers(up(4)) || up(4).covers(admitted{Name: "t", Op: admissionv1.Create}) {
		t.Error("covers: a later UPDATE or DELETE of the node covers an earlier one, and nothing covers a CREATE")
	}
}

// TestDecideWaitsForWritesInFlight: a review waits until the state shows
// the writes admitted before it, then judges on the tree that holds them;
// one that never lands is given up on after Settle.
func TestDecideWaitsForWritesInFlight(t *testing.T) {
	cohort := aqtest.Cohort("c", "root").Budget(gpu, "a100", "10").Obj()
	st := newFakeState(cohort)
	z := &Serializer{State: st, Now: time.Now, RecordTimings: RecordTimings{Settle: 2 * time.Second, InFlight: 5 * time.Second, Keep: 10 * time.Second}}
	second := Write{Name: "b", Op: admissionv1.Create, Spec: &aqtest.Team("b", "c").Budget(gpu, "a100", "6").Obj().Spec}
	inFlight := []admitted{{Name: "a", Op: admissionv1.Create, At: time.Now()}}

	go func() {
		time.Sleep(100 * time.Millisecond)
		st.upsert(aqtest.Team("a", "c").Budget(gpu, "a100", "6").Obj())
	}()
	start := time.Now()
	v, err := z.decide(context.Background(), second, inFlight, start.Add(z.Settle))
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed || v.Message != "c: budget nvidia.com/gpu on a100 is 10 but its children total 12" {
		t.Errorf("judged %+v, want the overrun that a's create makes", v)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > z.Settle {
		t.Errorf("decided after %s: it did not wait for a's create, or waited past it", d)
	}

	// A write that never lands: judged without it once Settle is over.
	third := Write{Name: "d", Op: admissionv1.Create, Spec: &aqtest.Team("d", "root").Budget(gpu, "a100", "1").Obj().Spec}
	start = time.Now()
	v, err = z.decide(context.Background(), third, []admitted{{Name: "never", Op: admissionv1.Create, At: start}}, start.Add(300*time.Millisecond))
	if err != nil || !v.Allowed {
		t.Fatalf("got %+v, %v; want admitted", v, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("decided after %s, before the write in flight was given up on", d)
	}
}

func TestInFlightLeavesOutTheSameWriteAndOldOnes(t *testing.T) {
	now := time.Now()
	z := &Serializer{Now: func() time.Time { return now }, RecordTimings: RecordTimings{Settle: time.Second, InFlight: 10 * time.Second, Keep: 30 * time.Second}}
	w := Write{Name: "t", Op: admissionv1.Update, Generation: 2}
	rec := &record{writes: []admitted{
		{Name: "t", Op: admissionv1.Update, Generation: 2, At: now},         // w judged again
		{Name: "u", Op: admissionv1.Create, At: now.Add(-11 * time.Second)}, // too old to land
		{Name: "v", Op: admissionv1.Create, At: now.Add(-time.Second)},
	}}
	got := z.inFlight(rec, w)
	if len(got) != 1 || got[0].Name != "v" {
		t.Errorf("in flight: %+v, want v alone", got)
	}
}

// TestJudgeLoweringWithoutTheRecord: a lowering of a team's budgets is
// judged on the state at once, without reading or writing the record (the
// Serializer here has no client: touching the record would panic), and a
// lowering that breaks a rule of the team itself is denied all the same.
func TestJudgeLoweringWithoutTheRecord(t *testing.T) {
	team := aqtest.Team("t", "c").Budget(gpu, "a100", "4").Lend("3").Obj()
	st := newFakeState(aqtest.Cohort("c", "root").Budget(gpu, "a100", "10").Obj(), team)
	z := &Serializer{State: st, Now: time.Now, RecordTimings: RecordTimings{Settle: time.Second, InFlight: 5 * time.Second, Keep: 10 * time.Second}}
	judge := func(nominal string) Verdict {
		t.Helper()
		low := aqtest.Team("t", "c").Budget(gpu, "a100", nominal).Lend("3").Obj()
		v, err := z.Judge(context.Background(), Write{Name: "t", Op: admissionv1.Update, Spec: &low.Spec, Old: &team.Spec, Generation: 1})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := judge("3"); !v.Allowed {
		t.Errorf("lowering 4 to 3 denied: %s", v.Message)
	}
	if v := judge("2"); v.Allowed || !strings.Contains(v.Message, "lendingLimit is above nominal 2") {
		t.Errorf("lowering below lendingLimit: %+v, want a denial saying lendingLimit is above nominal", v)
	}
}

// TestJudgeLoweringWaitsForTheOldObject: a lowering judged on an object the
// state has not seen yet (the team's last write, a moment ago) waits for
// it and is then judged as a lowering, without the record (the Serializer
// has no client: touching the record would panic).
func TestJudgeLoweringWaitsForTheOldObject(t *testing.T) {
	cohort := aqtest.Cohort("c", "root").Budget(gpu, "a100", "10").Obj()
	seen := aqtest.Team("t", "c").Budget(gpu, "a100", "1").Obj()
	seen.Generation = 1
	st := newFakeState(cohort, seen)
	z := &Serializer{State: st, Now: time.Now, RecordTimings: RecordTimings{Settle: 2 * time.Second, InFlight: 5 * time.Second, Keep: 10 * time.Second}}
	old := aqtest.Team("t", "c").Budget(gpu, "a100", "2").Obj() // the raise the state has not seen
	old.Generation = 2
	low := aqtest.Team("t", "c").Budget(gpu, "a100", "1").Obj()
	go func() {
		time.Sleep(100 * time.Millisecond)
		st.upsert(old)
	}()
	start := time.Now()
	v, err := z.Judge(context.Background(), Write{Name: "t", Op: admissionv1.Update, Spec: &low.Spec, Old: &old.Spec, Generation: 2})
	if err != nil || !v.Allowed {
		t.Fatalf("got %+v, %v; want the lowering admitted", v, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > z.Settle {
		t.Errorf("judged after %s: it did not wait for the old object, or waited past it", d)
	}
}
