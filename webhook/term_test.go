package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// termSerializer is a Serializer whose clock the test moves.
func termSerializer(now *time.Time) *Serializer {
	return &Serializer{Identity: "me", Address: "127.0.0.1:1", Now: func() time.Time { return *now },
		RecordTimings: RecordTimings{Settle: time.Second, InFlight: 10 * time.Second, Keep: 30 * time.Second, Term: 10 * time.Second}}
}

func recordAt(rv string, t *term) *record {
	return &record{cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}, term: t}
}

// TestModeOf: a term runs out on the replica's own clock, a length after
// it first saw it; a term that names this replica but that this process
// never held is waited out, not taken.
func TestModeOf(t *testing.T) {
	now := time.Unix(1000, 0)
	z := termSerializer(&now)
	want := func(rec *record, m mode) {
		t.Helper()
		if got, _ := z.modeOf(rec); got != m {
			t.Errorf("mode %d, want %d", got, m)
		}
	}
	want(recordAt("1", nil), free)

	other := &term{Holder: "other", Address: "10.0.0.2:9443", Renewed: now.Add(-time.Hour), Length: metav1.Duration{Duration: 10 * time.Second}}
	z.keep(recordAt("2", other))
	// Renewed an hour ago by the other's clock: what counts is when this
	// replica saw it.
	want(recordAt("2", other), forward)
	now = now.Add(9 * time.Second)
	want(recordAt("2", other), forward)
	now = now.Add(time.Second)
	if m, prev := z.modeOf(recordAt("2", other)); m != free || prev != other {
		t.Errorf("after its length: mode %d, previous %v; want free, with the term run out", m, prev)
	}

	// Renewed: seen anew.
	renewed := *other
	renewed.Renewed = other.Renewed.Add(time.Second)
	z.keep(recordAt("3", &renewed))
	want(recordAt("3", &renewed), forward)

	mine := &term{Holder: "me", Address: z.Address, Renewed: now, Length: metav1.Duration{Duration: 10 * time.Second}}
	z.keep(recordAt("4", mine))
	want(recordAt("4", mine), lapsing)
	z.everHeld = true
	want(recordAt("4", mine), free)

	z.mu.Lock()
	z.heldUntil = now.Add(time.Second)
	z.mu.Unlock()
	want(recordAt("4", mine), holding)
	// A newer record naming another holder ends this replica's term at once.
	z.keep(recordAt("5", other))
	if z.Now().Before(z.heldUntil) {
		t.Error("still holding after the record named another holder")
	}
}

// TestAdmitInTerm: the same write judged again is listed once and changes
// nothing a concurrent judgement relies on; a new write does.
func TestAdmitInTerm(t *testing.T) {
	now := time.Unix(1000, 0)
	z := termSerializer(&now)
	w := Write{Name: "t", Op: admissionv1.Update, Generation: 2}
	if got := z.admitInTerm(w, now); got != "term" || z.termVersion != 1 {
		t.Fatalf("first: %s, version %d", got, z.termVersion)
	}
	if got := z.admitInTerm(w, now); got != "already" || z.termVersion != 1 || len(z.termWrites) != 1 {
		t.Fatalf("again: %s, version %d, %d listed", got, z.termVersion, len(z.termWrites))
	}
	// A later write of the node replaces the earlier one.
	w3 := Write{Name: "t", Op: admissionv1.Update, Generation: 3}
	if got := z.admitInTerm(w3, now); got != "term" || z.termVersion != 2 || len(z.termWrites) != 1 || z.termWrites[0].Generation != 3 {
		t.Fatalf("later: %s, version %d, %+v", got, z.termVersion, z.termWrites)
	}
	// Old writes drop out.
	now = now.Add(11 * time.Second)
	z.admitInTerm(Write{Name: "u", Op: admissionv1.Create}, now)
	if len(z.termWrites) != 1 || z.termWrites[0].Name != "u" {
		t.Fatalf("listed %+v, want u alone", z.termWrites)
	}
	if in := z.termInFlight(Write{Name: "u", Op: admissionv1.Create}); len(in) != 0 {
		t.Errorf("a write's own entry is in flight for it: %+v", in)
	}
}

// TestJudgeInTermWaitsAndStopsAtTheTermsEnd: a holder judges on a state
// that holds the writes it admitted before, and admits nothing once its
// term is over.
func TestJudgeInTermWaitsAndStopsAtTheTermsEnd(t *testing.T) {
	cohort := aqtest.Cohort("c", "root").Budget(gpu, "a100", "10").Obj()
	st := newFakeState(cohort)
	z := &Serializer{State: st, Identity: "me", Address: "x:1", Now: time.Now,
		RecordTimings: RecordTimings{Settle: 2 * time.Second, InFlight: 5 * time.Second, Keep: 10 * time.Second, Term: 10 * time.Second}}
	z.heldUntil = time.Now().Add(time.Minute)
	rec := recordAt("1", nil)
	ctx := context.Background()
	a := Write{Name: "a", Op: admissionv1.Create, Spec: &aqtest.Team("a", "c").Budget(gpu, "a100", "6").Obj().Spec}
	b := Write{Name: "b", Op: admissionv1.Create, Spec: &aqtest.Team("b", "c").Budget(gpu, "a100", "6").Obj().Spec}
	var tm timings
	if v, err := z.judgeInTerm(ctx, a, rec, &tm); err != nil || !v.Allowed || tm.outcome != "term" {
		t.Fatalf("a: %+v, %v, %s", v, err, tm.outcome)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		st.upsert(aqtest.Team("a", "c").Budget(gpu, "a100", "6").Obj())
	}()
	start := time.Now()
	v, err := z.judgeInTerm(ctx, b, rec, &tm)
	if err != nil || v.Allowed || !strings.Contains(v.Message, "is 10 but its children total 12") {
		t.Fatalf("b: %+v, %v; want the overrun a's create makes", v, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("b judged after %s, before a landed", d)
	}
	z.mu.Lock()
	z.heldUntil = time.Now().Add(-time.Millisecond)
	z.mu.Unlock()
	d := Write{Name: "d", Op: admissionv1.Create, Spec: &aqtest.Team("d", "root").Budget(gpu, "a100", "1").Obj().Spec}
	if _, err := z.judgeInTerm(ctx, d, rec, &tm); err != errNotHolder {
		t.Errorf("after the term: %v, want errNotHolder", err)
	}
}

// TestDecodeRecordTerm: a term is read only from the term's format, and a
// format beyond it is refused with what to do.
func TestDecodeRecordTerm(t *testing.T) {
	cm := func(data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{RecordKey: data}}
	}
	rec, err := decodeRecord(cm(`{"format":2,"term":{"holder":"h","address":"a:1","renewed":"2026-11-30T00:00:00Z","length":"10s"},"writes":[]}`))
	if err != nil || rec.term == nil || rec.term.Holder != "h" || rec.term.Length.Duration != 10*time.Second {
		t.Fatalf("format 2: %+v, %v", rec, err)
	}
	if _, err := decodeRecord(cm(`{"format":1,"term":{"holder":"h","length":"10s"},"writes":[]}`)); err == nil {
		t.Error("a term in format 1 was read")
	}
	if _, err := decodeRecord(cm(`{"format":3,"writes":[]}`)); err == nil || !strings.Contains(err.Error(), "finish the upgrade of every replica") {
		t.Errorf("format 3: %v", err)
	}
}

// TestDecideWaitsSettleFromEachAdmission: a judgement made again after the
// review's own wait is over (another write was admitted meanwhile) still
// waits for that write, Settle from its admission, and judges with it.
func TestDecideWaitsSettleFromEachAdmission(t *testing.T) {
	cohort := aqtest.Cohort("c", "root").Budget(gpu, "a100", "10").Obj()
	st := newFakeState(cohort)
	z := &Serializer{State: st, Now: time.Now, RecordTimings: RecordTimings{Settle: 2 * time.Second, InFlight: 5 * time.Second, Keep: 10 * time.Second}}
	b := Write{Name: "b", Op: admissionv1.Create, Spec: &aqtest.Team("b", "c").Budget(gpu, "a100", "6").Obj().Spec}
	go func() {
		time.Sleep(100 * time.Millisecond)
		st.upsert(aqtest.Team("a", "c").Budget(gpu, "a100", "6").Obj())
	}()
	// The review began long ago: its own deadline has passed.
	v, err := z.decide(context.Background(), b, []admitted{{Name: "a", Op: admissionv1.Create, At: time.Now()}}, time.Now().Add(-time.Minute))
	if err != nil || v.Allowed {
		t.Fatalf("b: %+v, %v; want the overrun a's create makes: a was given up on a moment after its admission", v, err)
	}
}

// TestReleaseStopsTakingTheTerm: once a replica hands its term back, it
// admits nothing in it and does not take it again, whatever the record
// says.
func TestReleaseStopsTakingTheTerm(t *testing.T) {
	now := time.Unix(1000, 0)
	z := termSerializer(&now)
	mine := &term{Holder: "me", Address: z.Address, Renewed: now, Length: metav1.Duration{Duration: 10 * time.Second}}
	z.keep(recordAt("1", mine))
	z.everHeld, z.heldUntil = true, now.Add(5*time.Second)
	z.mu.Lock()
	z.stopping, z.heldUntil = true, time.Time{}
	z.mu.Unlock()
	if m, _ := z.modeOf(recordAt("1", mine)); m == holding || m == free {
		t.Errorf("a stopping replica's mode is %d: it would judge in, or take, the term it hands back", m)
	}
	if ok, err := z.acquire(context.Background(), recordAt("1", nil), nil); ok || err != nil {
		t.Errorf("a stopping replica took the term: %v, %v", ok, err)
	}
}
