package state

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// randomBytes is n bytes drawn from rng: the input genEvents turns into a
// random sequence of events.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
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
		data := randomBytes(rng, rng.IntN(1500))
		s := New()
		evs := genEvents(data)
		for _, ev := range evs {
			s.Apply(ev)
		}
		more := randomBytes(rng, 600)
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
	withDist.Distribution = &v1beta1.Distribution{Policy: v1beta1.DistributionProportional}
	if !SameShape("t", spec("8", "p"), withDist) {
		t.Error("distribution is read by no rule")
	}
}

// lowered is spec with each budget's nominal lowered to a random amount no
// larger, and sometimes a budget dropped.
func lowered(spec *v1beta1.AcceleratorQuotaSpec, rng *rand.Rand) *v1beta1.AcceleratorQuotaSpec {
	out := spec.DeepCopy()
	out.Budgets = out.Budgets[:0]
	for _, b := range spec.Budgets {
		if len(spec.Budgets) > 1 && rng.IntN(6) == 0 {
			continue
		}
		b = *b.DeepCopy()
		if n := AmountOf(b.Nominal); n > 0 && n < MaxAmount && rng.IntN(4) > 0 {
			b.Nominal = *resource.NewMilliQuantity(rng.Int64N(int64(n)+1), resource.DecimalSI)
		}
		out.Budgets = append(out.Budgets, b)
	}
	return out
}

// TestLoweringNeedsNoSerializing checks, over random states and writes, the
// two facts that let the webhook admit a lowering of a team's budgets
// without the admission record (docs/webhook.md): its verdict is the same
// whatever other write lands first, and every other write admitted on a
// state is still admitted once the lowering has landed.
func TestLoweringNeedsNoSerializing(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 8))
	runs := 300
	if testing.Short() {
		runs = 60
	}
	var clock time.Time // the last event's: a later time would move the marks
	apply := func(s *State, name string, spec *v1beta1.AcceleratorQuotaSpec) *State {
		s = s.Clone()
		ev := events.Event{Time: clock, Kind: events.KindAcceleratorQuota, Op: events.OpDelete, Key: name}
		if spec != nil {
			ev = events.QuotaUpserted(clock, &events.Quota{Name: name, Spec: *spec})
		}
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
		return s
	}
	counts := map[string]int{}
	for range runs {
		data := randomBytes(rng, rng.IntN(1500))
		s := New()
		for _, ev := range genEvents(data) {
			s.Apply(ev)
			clock = ev.Time
		}
		var teams []string
		tree := s.Tree()
		for _, name := range slices.Sorted(maps.Keys(tree)) {
			if name != v1beta1.RootName && tree[name].Role == v1beta1.RoleClusterQueue {
				teams = append(teams, name)
			}
		}
		if len(teams) == 0 {
			continue
		}
		more := randomBytes(rng, 400)
		for _, other := range writesOf(genEvents(more), rng) {
			x := teams[rng.IntN(len(teams))]
			old := s.Tree()[x]
			low := lowered(old, rng)
			got, ok := s.AdmitLowering(x, old, low)
			if !ok {
				t.Fatalf("lowering %s from %v to %v: not taken as a lowering", x, old.Budgets, low.Budgets)
			}
			if d := cmp.Diff(s.Admit(x, low), got); d != "" {
				t.Fatalf("AdmitLowering differs from Admit:\n%s", d)
			}
			counts["lowerings"]++
			if !got.Allowed {
				counts["lowerings denied"]++
			}
			if other.Key == x {
				continue // the API server serializes writes of one object
			}
			ospec := specOfWrite(other)
			// The lowering's verdict does not depend on the other write.
			// (Its warnings, about capacity, follow the marks of the
			// moment, which a write of the tree can move.)
			after := apply(s, other.Key, ospec)
			again, ok := after.AdmitLowering(x, old, low)
			again.Warnings = got.Warnings
			if d := cmp.Diff(got, again); !ok || d != "" {
				t.Fatalf("lowering %s: its verdict changed once %s was written (ok=%v):\n%s\nstate:\n%s", x, other, ok, d, s.Dump())
			}
			// The other write, admitted without the lowering, is admitted
			// with it.
			if verdict := s.Admit(other.Key, ospec); verdict.Allowed && got.Allowed {
				counts["others admitted"]++
				if with := apply(s, x, low).Admit(other.Key, ospec); !with.Allowed {
					t.Fatalf("%s is admitted on the state, and denied once %s is lowered to %v: %s\nstate:\n%s", other, x, low.Budgets, with.Message, s.Dump())
				}
			}
		}
	}
	t.Logf("%v", counts)
	if counts["others admitted"] < 100 || counts["lowerings denied"] == 0 {
		t.Errorf("the generator reaches too few cases: %v", counts)
	}
}

func TestAdmitLoweringTakesOnlyLowerings(t *testing.T) {
	s := New()
	s.Apply(events.Event{Seq: 1, Kind: events.KindAcceleratorQuota, Op: events.OpUpsert, Key: "root",
		Quota: &events.Quota{Name: "root", Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}}})
	spec := func(role v1beta1.Role, parent string, budgets ...string) *v1beta1.AcceleratorQuotaSpec {
		sp := &v1beta1.AcceleratorQuotaSpec{Role: role, ParentRef: &v1beta1.ParentReference{Name: parent}}
		for i := 0; i < len(budgets); i += 2 {
			sp.Budgets = append(sp.Budgets, v1beta1.Budget{ResourceName: "nvidia.com/gpu", ResourceFlavor: budgets[i], Nominal: resource.MustParse(budgets[i+1])})
		}
		return sp
	}
	for i, n := range []struct {
		name string
		spec *v1beta1.AcceleratorQuotaSpec
	}{{"c", spec(v1beta1.RoleCohort, "root", "a100", "10")}, {"t", spec(v1beta1.RoleClusterQueue, "c", "a100", "4", "h100", "2")}} {
		s.Apply(events.Event{Seq: uint64(i + 2), Kind: events.KindAcceleratorQuota, Op: events.OpUpsert, Key: n.name,
			Quota: &events.Quota{Name: n.name, Spec: *n.spec}})
	}
	team := spec(v1beta1.RoleClusterQueue, "c", "a100", "4", "h100", "2")
	for _, c := range []struct {
		what      string
		name      string
		old, spec *v1beta1.AcceleratorQuotaSpec
		want      bool
	}{
		{"a lower nominal", "t", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "3", "h100", "2"), true},
		{"a budget dropped", "t", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "4"), true},
		{"the same amounts written otherwise", "t", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "4000m", "h100", "2"), true},
		{"a higher nominal", "t", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "5", "h100", "2"), false},
		{"one lower, one higher", "t", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "1", "h100", "3"), false},
		{"a budget added", "t", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "4", "h100", "2", "b200", "1"), false},
		{"a move", "t", team, spec(v1beta1.RoleClusterQueue, "root", "a100", "1", "h100", "1"), false},
		{"a Cohort's", "c", spec(v1beta1.RoleCohort, "root", "a100", "10"), spec(v1beta1.RoleCohort, "root", "a100", "9"), false},
		{"a team made a Cohort", "t", team, spec(v1beta1.RoleCohort, "c", "a100", "1"), false},
		{"old not what the state holds", "t", spec(v1beta1.RoleClusterQueue, "c", "a100", "8", "h100", "2"), spec(v1beta1.RoleClusterQueue, "c", "a100", "5", "h100", "2"), false},
		{"a node the state lacks", "u", team, spec(v1beta1.RoleClusterQueue, "c", "a100", "1"), false},
		{"a deletion", "t", team, nil, false},
	} {
		if _, ok := s.AdmitLowering(c.name, c.old, c.spec); ok != c.want {
			t.Errorf("%s: AdmitLowering took it: %v, want %v", c.what, ok, c.want)
		}
	}
}

// Only a plane's identity writes a copy, deletes one, or makes a node one.
func TestCheckCopyWrite(t *testing.T) {
	planes := []string{"system:serviceaccount:ome:plane", "group:fleet-admins"}
	for name, tc := range map[string]struct {
		oldOrigin, newOrigin, user string
		groups, planes             []string
		want                       string
	}{
		"a local node":            {user: "alice", planes: planes},
		"the plane writes a copy": {newOrigin: "p1", user: "system:serviceaccount:ome:plane", planes: planes},
		"a plane's group":         {oldOrigin: "p1", user: "bob", groups: []string{"fleet-admins"}, planes: planes},
		"an admin edits a copy":   {oldOrigin: "p1", newOrigin: "p1", user: "alice", groups: []string{"system:masters"}, planes: planes, want: `team-a is a copy of a fleet node, projected by management plane "p1": only the plane changes it (system:serviceaccount:ome:plane, group:fleet-admins); change the node on the plane`},
		"an admin forges a copy":  {newOrigin: "p1", user: "alice", planes: planes, want: "only the plane changes it"},
		"an admin unmarks a copy": {oldOrigin: "p1", user: "alice", planes: planes, want: "only the plane changes it"},
		"no plane named":          {oldOrigin: "p1", user: "system:serviceaccount:ome:plane", want: "this cluster names no plane that may write copies (--webhook-projection-writers)"},
		"a group is not a user":   {oldOrigin: "p1", user: "fleet-admins", planes: planes, want: "only the plane"},
	} {
		got := CheckCopyWrite("team-a", tc.oldOrigin, tc.newOrigin, tc.user, tc.groups, tc.planes)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

// TestNothingUnderANodeBeingDeleted: a node whose deletionTimestamp is set
// (a finalizer holds it, as a foreground delete does) is gone as soon as
// its finalizers are released, with no review of that removal. A write
// that would put a node under it is refused, so that none is left
// ParentMissing; writes of other nodes, and of the node itself, are judged
// as before.
func TestNothingUnderANodeBeingDeleted(t *testing.T) {
	s := guideState(t)
	held := &events.Quota{Name: "old-cohort", UID: "u-old", Generation: 2, Deleting: true,
		Spec: *spec(v1beta1.RoleCohort, under("root"))}
	applyAll(s, events.QuotaUpserted(t0, held))
	team := spec(v1beta1.RoleClusterQueue, under("old-cohort"), budget("nvidia.com/gpu", "a100", "1"))
	const msg = "old-cohort is being deleted (it has a deletionTimestamp and waits for its finalizers), " +
		"so nothing can be put under it: name another parent in spec.parentRef, or wait until old-cohort is gone and create it again first"
	tests := map[string]struct {
		name string
		spec *v1beta1.AcceleratorQuotaSpec
		want string // "" admitted
	}{
		"a create under it": {name: "team-new", spec: team, want: "team-new: " + msg},
		"a move under it": {name: "team-beta", spec: spec(v1beta1.RoleClusterQueue, under("old-cohort"), budget("nvidia.com/gpu", "a100", "8")),
			want: "team-beta: " + msg},
		"a create elsewhere":         {name: "team-new", spec: spec(v1beta1.RoleCohort, under("ml-research"))},
		"a write of the node itself": {name: "old-cohort", spec: spec(v1beta1.RoleCohort, under("root"), budget("nvidia.com/gpu", "a100", "1"))},
		"deleting it":                {name: "old-cohort"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := s.Admit(tc.name, tc.spec)
			if a.Allowed != (tc.want == "") || a.Message != tc.want {
				t.Errorf("Admit = %v %q, want admitted %v %q", a.Allowed, a.Message, tc.want == "", tc.want)
			}
		})
	}
	// Once its finalizers are released and it is gone, the parent is
	// missing, as for any create under a node that does not exist.
	gone := events.Deleted(t0, events.KindAcceleratorQuota, "old-cohort")
	applyAll(s, gone)
	if a := s.Admit("team-new", team); a.Allowed {
		t.Errorf("a create under a deleted node was admitted")
	}
}
