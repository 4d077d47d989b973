//go:build linux

package webhook

import (
	"context"
	"fmt"
	"runtime"
	"slices"
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
// thread that holds it, which a loaded host moves less. looks counts the
// times it was taken.
type lockTimer struct {
	*fakeState
	held, cpu time.Duration
	looks     int
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (l *lockTimer) Observe(fn func(*state.State)) <-chan struct{} {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return l.fakeState.Observe(func(s *state.State) {
		t, c := time.Now(), threadCPU()
		fn(s)
		l.cpu += threadCPU() - c
		l.held += time.Since(t)
		l.looks++
	})
}

// lockBudgets is how many budgets each spec of BenchmarkJudgeUnderLock
// carries: the most the CRD allows.
const lockBudgets = 16

// wideSpec is a spec of role under parent with lockBudgets budgets of n
// each (none when n is ""), on resources r00, r01, ... of flavor a100.
func wideSpec(role v1beta1.Role, parent, n string) *v1beta1.AcceleratorQuotaSpec {
	sp := &v1beta1.AcceleratorQuotaSpec{Role: role, ParentRef: &v1beta1.ParentReference{Name: parent}}
	for i := range lockBudgets {
		if n != "" {
			sp.Budgets = append(sp.Budgets, v1beta1.Budget{ResourceName: fmt.Sprintf("example.com/r%02d", i), ResourceFlavor: "a100", Nominal: resource.MustParse(n)})
		}
	}
	return sp
}

// BenchmarkJudgeUnderLock is one judgement (a dry run, so that nothing
// is reserved and every round is alike) of a raise of a team, on a tree of
// 5,000 nodes (100 Cohorts of 49 teams under root), every spec with 16
// budgets, beside 256 pending reservations, each of 16 budgets too:
//
//   - standing: 253 standing raises of teams under other Cohorts,
//     unrelated but above what the state holds (so each is compared with
//     the state and left pending), and 3 standing reservations of the
//     team's siblings at what the state holds (so each is compared and
//     found covered);
//   - chain: 256 creates of Cohorts, each under the one before, the first
//     under the team's Cohort, listed deepest first: all related, one
//     through the next.
//
// It reports the time under the reducer's lock per judgement and per
// look at the state (lock-ns/op, lock-ns/look; lock-cpu-ns/op in the CPU
// time of the thread that holds it, which a loaded host moves less).
func BenchmarkJudgeUnderLock(b *testing.B) {
	const cohorts, teams = 100, 49
	evs := []events.Event{
		events.FlavorUpserted(at0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.Synced(at0),
		quotaAt("root", "u-root", 1, &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
	}
	rv := uint64(1)
	for c := range cohorts {
		co := fmt.Sprintf("co-%03d", c)
		rv++
		evs = append(evs, quotaAt(co, "u-"+co, rv, wideSpec(v1beta1.RoleCohort, "root", "100000")))
		for i := range teams {
			name := fmt.Sprintf("%s-t%02d", co, i)
			rv++
			evs = append(evs, quotaAt(name, "u-"+name, rv, wideSpec(v1beta1.RoleClusterQueue, co, "1")))
		}
	}
	standing := func(name, parent, n string) v1beta1.Reservation {
		return v1beta1.Reservation{Review: "r-" + name, Node: name, Operation: "UPDATE", UID: "u-" + name, Since: "2",
			Spec: wideSpec(v1beta1.RoleClusterQueue, parent, n), Replica: "r2"}
	}
	cases := map[string]func() []v1beta1.Reservation{
		"standing": func() []v1beta1.Reservation {
			var rs []v1beta1.Reservation
			for i := range 253 {
				co := fmt.Sprintf("co-%03d", 1+i%(cohorts-1))
				rs = append(rs, standing(fmt.Sprintf("%s-t%02d", co, i/(cohorts-1)), co, "2"))
			}
			for i := range 3 {
				rs = append(rs, standing(fmt.Sprintf("co-000-t%02d", i+1), "co-000", "1"))
			}
			return rs
		},
		"chain": func() []v1beta1.Reservation {
			var rs []v1beta1.Reservation
			for i := range 256 {
				name, parent := fmt.Sprintf("chain-%03d", i), fmt.Sprintf("chain-%03d", i-1)
				if i == 0 {
					parent = "co-000"
				}
				rs = append(rs, v1beta1.Reservation{Review: "r-" + name, Node: name, Operation: "CREATE", UID: "u-" + name,
					Spec: wideSpec(v1beta1.RoleCohort, parent, ""), Replica: "r2"})
			}
			slices.Reverse(rs)
			return rs
		},
	}
	for _, name := range []string{"standing", "chain"} {
		b.Run(name, func(b *testing.B) {
			st := &lockTimer{fakeState: newFakeState(evs...)}
			l, f := testLedger(st)
			led := &v1beta1.AdmissionLedger{ObjectMeta: metav1.ObjectMeta{Name: l.Name, UID: "ledger-1", ResourceVersion: "1"}}
			led.Spec.Reservations = cases[name]()
			led.Spec.ReservationCount = int32(len(led.Spec.Reservations))
			f.led, f.rv = led, 1
			ctx := context.Background()
			if _, err := l.read(ctx, true); err != nil {
				b.Fatal(err)
			}
			// No base: the write is judged on the state as it is, with no
			// look at how far it has seen first.
			w := Write{Name: "co-000-t00", Op: admissionv1.Update, ObjectUID: "u-co-000-t00", UID: "review-raise", DryRun: true,
				Old: wideSpec(v1beta1.RoleClusterQueue, "co-000", "1"), Spec: wideSpec(v1beta1.RoleClusterQueue, "co-000", "2")}
			b.ReportAllocs()
			st.held, st.cpu, st.looks = 0, 0, 0
			for b.Loop() {
				// A refusal (with "retry") is an outcome too: the time
				// under the lock is what is measured.
				if _, err := l.Judge(ctx, w); err != nil && name == "standing" {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.held.Nanoseconds())/float64(b.N), "lock-ns/op")
			b.ReportMetric(float64(st.held.Nanoseconds())/float64(max(st.looks, 1)), "lock-ns/look")
			b.ReportMetric(float64(st.cpu.Nanoseconds())/float64(b.N), "lock-cpu-ns/op")
		})
	}
}
