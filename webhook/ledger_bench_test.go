//go:build linux

package webhook

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// lockTimer is a fakeState that adds up how long the reducer's lock is
// held for the webhook's reads: on the wall clock, and in CPU time of the
// thread that holds it, which a loaded host moves less.
type lockTimer struct {
	*fakeState
	held, cpu time.Duration
}

func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (l *lockTimer) Observe(fn func(*state.State)) <-chan struct{} {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return l.fakeState.Observe(func(s *state.State) {
		t, c := time.Now(), threadCPU()
		fn(s)
		l.cpu += threadCPU() - c
		l.held += time.Since(t)
	})
}

// BenchmarkJudgeUnderLock is one judgement (a dry run, so that nothing
// is reserved and every round is alike) of a raise of a team, on a tree of
// 5,000 nodes (100 Cohorts of 49 teams under root) with 256 pending
// reservations: 253 creates of teams under other Cohorts, unrelated, and
// 3 standing raises of the team's siblings, related, which a review
// never waits for. It reports the time under the reducer's lock per
// judgement (lock-ns/op, and lock-cpu-ns/op in the CPU time of its
// thread).
func BenchmarkJudgeUnderLock(b *testing.B) {
	const cohorts, teams = 100, 49
	evs := []events.Event{
		events.FlavorUpserted(at0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.Synced(at0),
		quotaAt("root", "u-root", 1, &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
	}
	rv := uint64(1)
	team := func(parent, n string) *v1beta1.AcceleratorQuotaSpec {
		return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: parent},
			Budgets: []v1beta1.Budget{{ResourceName: gpu, ResourceFlavor: "a100", Nominal: resource.MustParse(n)}}}
	}
	for c := range cohorts {
		co := fmt.Sprintf("co-%03d", c)
		rv++
		evs = append(evs, quotaAt(co, "u-"+co, rv, &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort,
			ParentRef: &v1beta1.ParentReference{Name: "root"}, Budgets: []v1beta1.Budget{{ResourceName: gpu, ResourceFlavor: "a100", Nominal: resource.MustParse("1000")}}}))
		for i := range teams {
			name := fmt.Sprintf("%s-t%02d", co, i)
			rv++
			evs = append(evs, quotaAt(name, "u-"+name, rv, team(co, "1")))
		}
	}
	st := &lockTimer{fakeState: newFakeState(evs...)}
	l, f := testLedger(st)
	led := &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name, UID: "ledger-1", ResourceVersion: "1"}}
	for i := range 253 {
		co := fmt.Sprintf("co-%03d", 1+i%(cohorts-1))
		name := fmt.Sprintf("%s-new%03d", co, i)
		led.Spec.Reservations = append(led.Spec.Reservations, v1beta1.Reservation{Review: "r-" + name, Node: name, Operation: "CREATE",
			UID: "u-" + name, Spec: team(co, "1"), Replica: "r2"})
	}
	for i := range 3 {
		name := fmt.Sprintf("co-000-t%02d", i+1)
		led.Spec.Reservations = append(led.Spec.Reservations, v1beta1.Reservation{Review: "r-" + name, Node: name, Operation: "UPDATE",
			UID: "u-" + name, Since: "2", Spec: team("co-000", "2"), Replica: "r2"})
	}
	led.Spec.ReservationCount = int32(len(led.Spec.Reservations))
	f.led, f.rv = led, 1
	ctx := context.Background()
	if _, err := l.read(ctx, true); err != nil {
		b.Fatal(err)
	}
	w := Write{Name: "co-000-t00", Op: admissionv1.Update, ObjectUID: "u-co-000-t00", Base: "3", UID: "review-raise", DryRun: true,
		Old: team("co-000", "1"), Spec: team("co-000", "2")}
	b.ReportAllocs()
	st.held, st.cpu = 0, 0
	for b.Loop() {
		if v, err := l.Judge(ctx, w); err != nil || !v.Allowed {
			b.Fatalf("%+v, %v", v, err)
		}
	}
	b.ReportMetric(float64(st.held.Nanoseconds())/float64(b.N), "lock-ns/op")
	b.ReportMetric(float64(st.cpu.Nanoseconds())/float64(b.N), "lock-cpu-ns/op")
}
