package state

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// writesOf picks the AcceleratorQuota writes out of a generated sequence,
// some renamed to "x", the parent the generator names but never creates.
func writesOf(evs []events.Event, rng *rand.Rand) []events.Event {
	var out []events.Event
	for _, ev := range evs {
		if ev.Kind != events.KindAcceleratorQuota || ev.Validate() != nil {
			continue
		}
		if rng.IntN(8) == 0 {
			ev.Key = "x"
			if ev.Quota != nil {
				q := *ev.Quota
				q.Name = "x"
				ev.Quota = &q
			}
		}
		out = append(out, ev)
	}
	return out
}

func specOfWrite(ev events.Event) *v1beta1.AcceleratorQuotaSpec {
	if ev.Op == events.OpDelete {
		return nil
	}
	return &ev.Quota.Spec
}

// TestAdmitMatchesFullEvaluation checks State.Admit, which reads only what
// a write can change through the reducer's indexes, against Admit, which
// evaluates the whole tree before and after the write: over random states
// (cycles, missing parents, teams with children, depth limits, overruns
// written while nothing checked them) and random writes, both give the same
// answer, message, denied violations and warnings included.
func TestAdmitMatchesFullEvaluation(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	runs := 400
	if testing.Short() {
		runs = 100
	}
	counts := map[string]int{}
	for run := range runs {
		data := make([]byte, rng.IntN(1500))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		s := New()
		evs := genEvents(data)
		for _, ev := range evs {
			s.Apply(ev)
		}
		more := make([]byte, 600)
		for i := range more {
			more[i] = byte(rng.UintN(256))
		}
		for i, w := range writesOf(genEvents(more), rng) {
			spec := specOfWrite(w)
			var dump string
			if i%8 == 0 {
				dump = s.Dump()
			}
			got := s.Admit(w.Key, spec)
			want := Admit(s.Tree(), s.Marks(), s.FlavorNames(), s.Config(), w.Key, spec)
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("run %d, write %d (%s): State.Admit differs from Admit (-full +incremental):\n%s\nstate:\n%s\nevents:\n%s",
					run, i, w, d, s.Dump(), describe(evs))
			}
			if dump != "" && dump != s.Dump() {
				t.Fatalf("run %d: State.Admit modified the state", run)
			}
			switch {
			case got.Allowed:
				counts["allowed"]++
			case len(got.Denied) == 0:
				counts["refused"]++
			default:
				for _, v := range got.Denied {
					counts[string(v.Reason)]++
				}
			}
			if len(got.Warnings) > 0 {
				counts["warned"]++
			}
			// Keep the write half of the time, so that the states wander.
			if rng.IntN(2) == 0 {
				w.Seq = s.LastSeq() + 1
				s.Apply(w)
			}
		}
	}
	t.Logf("verdicts: %v", counts)
	for _, k := range []string{"allowed", "refused", "warned", string(ReasonParentMissing), string(ReasonParentCycle), string(ReasonUnreachable),
		string(ReasonNodeKindInvalid), string(ReasonDepthExceeded), string(ReasonFlavorMissing), string(ReasonContainmentViolated)} {
		if counts[k] == 0 {
			t.Errorf("no write came out %s: the generator does not reach it", k)
		}
	}
}

// FuzzAdmit is TestAdmitMatchesFullEvaluation's property on fuzz input: the
// first half builds a state, the second half's writes are judged.
func FuzzAdmit(f *testing.F) {
	f.Add([]byte("the guide's tree, more or less, in bytes"), []byte{0, 0, 1, 0, 0, 0, 2, 3})
	f.Fuzz(func(t *testing.T, state, writes []byte) {
		s := New()
		for _, ev := range genEvents(state) {
			s.Apply(ev)
		}
		rng := rand.New(rand.NewPCG(uint64(len(writes)), 1))
		for _, w := range writesOf(genEvents(writes), rng) {
			spec := specOfWrite(w)
			got := s.Admit(w.Key, spec)
			want := Admit(s.Tree(), s.Marks(), s.FlavorNames(), s.Config(), w.Key, spec)
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("write %s: State.Admit differs from Admit (-full +incremental):\n%s\nstate:\n%s", w, d, s.Dump())
			}
		}
	})
}

func TestSameShape(t *testing.T) {
	spec := func(nominal string, parent string) *v1beta1.AcceleratorQuotaSpec {
		s := &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: parent}}
		s.Budgets = []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse(nominal)}}
		return s
	}
	if !SameShape("t", spec("8", "p"), spec("8000m", "p")) {
		t.Error("8 and 8000m should read the same")
	}
	if SameShape("t", spec("8", "p"), spec("9", "p")) {
		t.Error("a new nominal changes the shape")
	}
	if SameShape("t", spec("8", "p"), spec("8", "q")) {
		t.Error("a new parent changes the shape")
	}
	withDist := spec("8", "p")
	withDist.Distribution = &apiextensionsv1.JSON{Raw: []byte(`{"policy":"even"}`)}
	if !SameShape("t", spec("8", "p"), withDist) {
		t.Error("distribution is read by no rule")
	}
}
