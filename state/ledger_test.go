package state

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// versioned is an AcceleratorQuota event with a uid and a resourceVersion.
func versioned(name, uid string, version uint64, sp *v1beta1.AcceleratorQuotaSpec) events.Event {
	ev := events.QuotaUpserted(t0, &events.Quota{Name: name, UID: uid, Generation: 1, Spec: *sp})
	ev.Version = version
	return ev
}

func TestSettled(t *testing.T) {
	team := func(n string) *v1beta1.AcceleratorQuotaSpec { return guideTree()["team-alpha"] }
	tests := map[string]struct {
		evs  []events.Event
		r    v1beta1.Reservation
		want bool
	}{
		"a create not seen yet": {r: v1beta1.Reservation{Node: "a", Operation: "CREATE", UID: "u1"}},
		"a create seen":         {evs: []events.Event{versioned("a", "u1", 5, team("a"))}, r: v1beta1.Reservation{Node: "a", Operation: "CREATE", UID: "u1"}, want: true},
		"another life of the name": {evs: []events.Event{versioned("a", "u0", 5, team("a"))},
			r: v1beta1.Reservation{Node: "a", Operation: "CREATE", UID: "u1"}},
		"a create without uid never settles": {evs: []events.Event{versioned("a", "", 5, team("a"))}, r: v1beta1.Reservation{Node: "a", Operation: "CREATE"}},
		"an update on the version seen": {evs: []events.Event{versioned("a", "u1", 5, team("a"))},
			r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Base: "5"}},
		"an update whose base the state has not seen": {evs: []events.Event{versioned("a", "u1", 5, team("a"))},
			r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Base: "7"}},
		"an update the node moved past": {evs: []events.Event{versioned("a", "u1", 5, team("a")), versioned("a", "u1", 8, team("a"))},
			r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Base: "5"}, want: true},
		"a delete of a node gone": {evs: []events.Event{versioned("a", "u1", 5, team("a")), func() events.Event {
			ev := events.Deleted(t0, events.KindAcceleratorQuota, "a")
			ev.Version = 9
			return ev
		}()}, r: v1beta1.Reservation{Node: "a", Operation: "DELETE", UID: "u1", Base: "5"}, want: true},
		"a delete of a node the state has not seen at all": {r: v1beta1.Reservation{Node: "a", Operation: "DELETE", UID: "u1", Base: "5"}},
		"a base that is not a number":                      {evs: []events.Event{versioned("a", "u1", 5, team("a"))}, r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Base: "x"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := New()
			applyAll(s, tc.evs...)
			if got := s.Settled(&tc.r); got != tc.want {
				t.Errorf("Settled = %v, want %v (progress %d)", got, tc.want, s.Progress())
			}
		})
	}
}

// TestUnrelatedReservationsChangeNoVerdict is the argument behind Related,
// checked on random states: a write admitted on the state alone is still
// admitted once a reserved write that Related leaves out lands, and the
// reserved write is still admitted once the judged one lands. (An
// unrelated write may still make a denial milder, as the delete of a node
// that a move would have taken too deep: ignoring it only denies more.)
func TestUnrelatedReservationsChangeNoVerdict(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 12))
	runs, checked, related := 400, 0, 0
	if testing.Short() {
		runs = 80
	}
	for run := range runs {
		data := randomBytes(rng, rng.IntN(1500))
		s := New()
		for _, ev := range genEvents(data) {
			s.Apply(ev)
		}
		more := randomBytes(rng, 600)
		ws := writesOf(genEvents(more), rng)
		for i := 0; i+1 < len(ws); i += 2 {
			w, e := ws[i], ws[i+1]
			if w.Key == e.Key {
				continue
			}
			r := v1beta1.Reservation{Node: e.Key, Spec: specOfWrite(e)}
			if len(s.Related(w.Key, specOfWrite(w), []v1beta1.Reservation{r})) > 0 {
				related++
				continue
			}
			checked++
			tree := s.Tree()
			with := cloneTree(tree)
			if r.Spec == nil {
				delete(with, r.Node)
			} else {
				with[r.Node] = r.Spec
			}
			alone := Admit(tree, s.Marks(), s.FlavorNames(), s.Config(), w.Key, specOfWrite(w))
			both := Admit(with, s.Marks(), s.FlavorNames(), s.Config(), w.Key, specOfWrite(w))
			if alone.Allowed && !both.Allowed {
				t.Fatalf("run %d: %s and the unrelated %s: judged alone %+v, after it %+v\nstate:\n%s", run, w, e, alone, both, s.Dump())
			}
			wspec := specOfWrite(w)
			withW := cloneTree(tree)
			if wspec == nil {
				delete(withW, w.Key)
			} else {
				withW[w.Key] = wspec
			}
			eAlone := Admit(tree, s.Marks(), s.FlavorNames(), s.Config(), e.Key, r.Spec)
			eAfter := Admit(withW, s.Marks(), s.FlavorNames(), s.Config(), e.Key, r.Spec)
			if eAlone.Allowed && !eAfter.Allowed {
				t.Fatalf("run %d: the reserved %s and the unrelated %s: judged alone %+v, after it %+v\nstate:\n%s", run, e, w, eAlone, eAfter, s.Dump())
			}
		}
	}
	t.Logf("pairs checked unrelated: %d, related: %d", checked, related)
	if checked < 100 || related < 100 {
		t.Errorf("the generator gave %d unrelated and %d related pairs: too few to say anything", checked, related)
	}
}

func cloneTree(t Tree) Tree {
	if t == nil {
		return Tree{}
	}
	return maps.Clone(t)
}

// Two teams that each fit their Cohort alone and not together: with the
// other's create reserved and unsettled, the second is admitted on the
// state alone and refused on the combination where the first lands; an
// unrelated reservation changes nothing.
func TestAdmitUncertain(t *testing.T) {
	s := guideState(t)
	team := func(parent, n string) *v1beta1.AcceleratorQuotaSpec {
		return spec(v1beta1.RoleClusterQueue, under(parent), budget("nvidia.com/gpu", "a100", n))
	}
	applyAll(s, quota("team-alpha", team("ml-research", "8")), quota("other", spec(v1beta1.RoleCohort, under("root"))))
	gamma := v1beta1.Reservation{Node: "team-gamma", Operation: "CREATE", UID: "u1", Spec: team("ml-research", "8")}
	elsewhere := v1beta1.Reservation{Node: "team-omega", Operation: "CREATE", UID: "u2", Spec: team("other", "8")}
	delta := team("ml-research", "8")
	if a := s.Admit("team-delta", delta); !a.Allowed {
		t.Fatalf("team-delta does not fit alone: %+v", a)
	}
	rel := s.Related("team-delta", delta, []v1beta1.Reservation{elsewhere, gamma})
	if len(rel) != 1 || rel[0].Node != "team-gamma" {
		t.Fatalf("Related = %v, want team-gamma's create alone", rel)
	}
	a, ok := AdmitUncertain(s.Tree(), s.Marks(), s.FlavorNames(), s.Config(), "team-delta", delta, rel)
	if ok || a.Allowed || a.Message != "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 32" {
		t.Errorf("with team-gamma's create reserved: %+v, want the overrun refused", a)
	}
	if a, ok := AdmitUncertain(s.Tree(), s.Marks(), s.FlavorNames(), s.Config(), "team-delta", delta, []v1beta1.Reservation{elsewhere}); !ok || !a.Allowed {
		t.Errorf("beside a create elsewhere: %+v", a)
	}
	if a, ok := AdmitUncertain(s.Tree(), s.Marks(), s.FlavorNames(), s.Config(), "team-delta", team("ml-research", "0"), rel); !ok || !a.Allowed {
		t.Errorf("a team of 0 beside team-gamma's create: %+v", a)
	}
}

// TestStandingCoversItsWrites is the argument behind standing
// reservations, checked on random states. A team t stands reserved at
// spec S: another write x is admitted only if it is admitted on the state
// and, unless the state holds t within S already (Covered), on the state
// with t at S. Then x is admitted on the state with t at any W within S,
// which is what lands while S stands: no write x admitted by a replica that
// counted S breaks a rule with a write of t that S stood for.
func TestStandingCoversItsWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 1202))
	runs, checked, covered := 400, 0, 0
	if testing.Short() {
		runs = 80
	}
	for run := range runs {
		s := New()
		for _, ev := range genEvents(randomBytes(rng, rng.IntN(1500))) {
			s.Apply(ev)
		}
		tree := s.Tree()
		var teams []string
		for n, sp := range tree {
			if SameSeat(n, sp, sp) && len(sp.Budgets) > 0 {
				teams = append(teams, n)
			}
		}
		if len(teams) == 0 {
			continue
		}
		slices.Sort(teams)
		team := teams[rng.IntN(len(teams))]
		cur := tree[team]
		// S raises (or keeps, or lowers) each budget; W is within S.
		stand := scaledSpec(cur, func() int64 { return 1 + rng.Int64N(4) }, 2)
		if !Within(team, stand, stand) {
			t.Fatalf("run %d: %s at %v is not within itself", run, team, stand.Budgets)
		}
		r := v1beta1.Reservation{Node: team, Operation: "UPDATE", UID: s.members[team].uid, Spec: stand}
		withS := cloneTree(tree)
		withS[team] = stand
		// Random writes, and writes of the team's parent and siblings
		// with their budgets scaled, which meet S most.
		type write struct {
			key  string
			spec *v1beta1.AcceleratorQuotaSpec
		}
		var xs []write
		for _, x := range writesOf(genEvents(randomBytes(rng, 600)), rng) {
			xs = append(xs, write{x.Key, specOfWrite(x)})
		}
		parent := parentOf(team, cur)
		for n, sp := range tree {
			if n == parent || parentOf(n, sp) == parent {
				xs = append(xs, write{n, scaledSpec(sp, func() int64 { return rng.Int64N(5) }, 2)})
			}
		}
		for _, x := range xs {
			if x.key == team {
				continue
			}
			if !Admit(tree, s.Marks(), s.FlavorNames(), s.Config(), x.key, x.spec).Allowed {
				continue
			}
			if s.Covered(&r) {
				covered++
			} else if !Admit(withS, s.Marks(), s.FlavorNames(), s.Config(), x.key, x.spec).Allowed {
				continue
			}
			checked++
			w := scaledSpec(stand, func() int64 { return rng.Int64N(5) }, 4)
			if !Within(team, stand, w) {
				t.Fatalf("run %d: %v is not within %v", run, w.Budgets, stand.Budgets)
			}
			withW := cloneTree(tree)
			withW[team] = w
			if a := Admit(withW, s.Marks(), s.FlavorNames(), s.Config(), x.key, x.spec); !a.Allowed {
				t.Fatalf("run %d: the write of %s admitted with %s standing at %v, refused with it at %v: %s\nstate:\n%s",
					run, x.key, team, stand.Budgets, w.Budgets, a.Message, s.Dump())
			}
		}
	}
	t.Logf("writes checked: %d, of them with the standing reservation covered: %d", checked, covered)
	if checked < 200 || covered < 20 {
		t.Errorf("the generator gave %d writes to check, %d covered: too few to say anything", checked, covered)
	}
}

func TestStanding(t *testing.T) {
	team := func(n string) *v1beta1.AcceleratorQuotaSpec {
		return spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", n))
	}
	s := New()
	applyAll(s, versioned("a", "u1", 5, team("4")))
	tests := map[string]struct {
		r                v1beta1.Reservation
		settled, covered bool
	}{
		"above the node":                {r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Since: "5", Spec: team("6")}},
		"at the node":                   {r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Since: "5", Spec: team("4")}, covered: true},
		"below the node":                {r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Since: "5", Spec: team("2")}, covered: true},
		"of another life":               {r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u0", Since: "3", Spec: team("2")}, settled: true},
		"of a life not seen yet":        {r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u2", Since: "7", Spec: team("2")}},
		"of a node gone":                {r: v1beta1.Reservation{Node: "b", Operation: "UPDATE", UID: "u3", Since: "4", Spec: team("2")}, settled: true},
		"without since, of a node gone": {r: v1beta1.Reservation{Node: "b", Operation: "UPDATE", UID: "u3", Spec: team("2")}},
		"moved elsewhere": {r: v1beta1.Reservation{Node: "a", Operation: "UPDATE", UID: "u1", Since: "5",
			Spec: spec(v1beta1.RoleClusterQueue, under("ml-platform"), budget("nvidia.com/gpu", "a100", "1"))}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if !Standing(&tc.r) {
				t.Fatal("not a standing reservation")
			}
			if got := s.Settled(&tc.r); got != tc.settled {
				t.Errorf("Settled = %v, want %v", got, tc.settled)
			}
			if got := s.Covered(&tc.r); got != tc.covered {
				t.Errorf("Covered = %v, want %v", got, tc.covered)
			}
		})
	}
	if Standing(&v1beta1.Reservation{Node: "a", Operation: "UPDATE", Base: "5"}) || Standing(&v1beta1.Reservation{Node: "a", Operation: "CREATE"}) {
		t.Error("an update with a base, or a create, is standing")
	}
}

// TestListHoldsProgress: the objects of a list come in the order of their
// names. Until the list is all in, Progress holds still while Horizon
// follows the highest version applied; the end of the list sets Progress
// to the list's version.
func TestListHoldsProgress(t *testing.T) {
	team := guideTree()["team-alpha"]
	s := New()
	applyAll(s, versioned("a", "ua", 3, team), versioned("b", "ub", 6, team))
	applyAll(s, events.QuotasListing(t0), versioned("a", "ua", 25, team))
	if s.Progress() != 6 || s.Horizon() != 25 {
		t.Fatalf("within a list: progress %d, horizon %d; want 6 and 25", s.Progress(), s.Horizon())
	}
	// b's version 20 is not in yet: a reservation judged on b at 6 is not
	// settled by a's newer version.
	if s.Settled(&v1beta1.Reservation{Node: "b", Operation: "UPDATE", UID: "ub", Base: "12"}) {
		t.Error("an update of b on a version the state has not seen counts as settled within a list")
	}
	applyAll(s, versioned("b", "ub", 20, team), events.QuotasListed(t0, 30))
	if s.Progress() != 30 || s.Horizon() != 30 {
		t.Fatalf("after the list: progress %d, horizon %d; want 30 and 30", s.Progress(), s.Horizon())
	}
	if !s.Settled(&v1beta1.Reservation{Node: "b", Operation: "UPDATE", UID: "ub", Base: "12"}) {
		t.Error("an update of b that the list shows superseded is not settled")
	}
	// The watch goes on in order.
	applyAll(s, versioned("a", "ua", 31, team))
	if s.Progress() != 31 || s.Horizon() != 31 {
		t.Errorf("after the list: progress %d, horizon %d; want 31", s.Progress(), s.Horizon())
	}
}

// TestRestartAfterADeletionReachesTheFloor is the boundary of a stuck
// floor: a replica whose newest AcceleratorQuota event was a deletion
// raises the ledger's floor to that deletion's version, which no object
// carries. A replica started afterwards lists what is left, whose
// versions are all older; the list's own version is not, and the end of
// the list carries it, so the new replica's Progress reaches the floor.
func TestRestartAfterADeletionReachesTheFloor(t *testing.T) {
	team := guideTree()["team-alpha"]
	before := New()
	gone := events.Deleted(t0, events.KindAcceleratorQuota, "b")
	gone.Version = 10
	applyAll(before, versioned("a", "ua", 5, team), versioned("b", "ub", 7, team), gone)
	floor := before.Horizon()
	if floor != 10 {
		t.Fatalf("floor %d, want 10", floor)
	}
	restarted := New()
	applyAll(restarted, events.QuotasListing(t0), versioned("a", "ua", 5, team), events.QuotasListed(t0, 12))
	if restarted.Progress() < floor {
		t.Errorf("after a restart, progress %d stays below the floor %d", restarted.Progress(), floor)
	}
}

// TestTreeSnapshot: a snapshot taken in O(1) builds the tree as it was
// when taken, whatever the reducer applies later, in this state or in a
// clone of it.
func TestTreeSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 40))
	team := guideTree()["team-alpha"]
	step := func(s *State) {
		name := string(rune('a' + rng.IntN(20)))
		if rng.IntN(4) == 0 {
			applyAll(s, events.Deleted(t0, events.KindAcceleratorQuota, name))
			return
		}
		sp := *team
		applyAll(s, quota(name, &sp))
	}
	s := New()
	var snaps []TreeSnapshot
	var want []Tree
	for i := range 500 {
		step(s)
		if got := s.TreeSnapshot().Tree(); !maps.Equal(got, s.Tree()) {
			t.Fatalf("after event %d: snapshot %v, tree %v", i, got, s.Tree())
		}
		if i%50 == 0 {
			snaps, want = append(snaps, s.TreeSnapshot()), append(want, s.Tree())
		}
	}
	c := s.Clone()
	for range 200 {
		step(s)
		step(c)
	}
	for _, st := range []*State{s, c} {
		if got := st.TreeSnapshot().Tree(); !maps.Equal(got, st.Tree()) {
			t.Fatalf("after cloning: snapshot %v, tree %v", got, st.Tree())
		}
	}
	for i, snap := range snaps {
		if got := snap.Tree(); !maps.Equal(got, want[i]) {
			t.Errorf("snapshot %d changed: %v, was %v", i, got, want[i])
		}
	}
}

// outcomeStats counts the outcomes the dominated tests tried, by what a
// standing reservation's write did to a budget: a test that tried none
// of a kind proves nothing of it.
type outcomeStats struct{ combinations, between, dropped, lowered int }

// withinDraw is a write that a standing reservation r stands for, drawn
// at random: r's spec with each budget kept, set between the node's
// current nominal (cur, 0 when it has none) and r's, lowered below that,
// or dropped. Its seat (role, parent, fields) is r's.
func withinDraw(rng *rand.Rand, cur, r *v1beta1.AcceleratorQuotaSpec, st *outcomeStats) *v1beta1.AcceleratorQuotaSpec {
	out := r.DeepCopy()
	out.Budgets = nil
	for _, b := range r.Budgets {
		top := b.Nominal.Value()
		var from int64
		if cur != nil {
			for _, cb := range cur.Budgets {
				if cb.ResourceName == b.ResourceName && cb.ResourceFlavor == b.ResourceFlavor {
					from = min(cb.Nominal.Value(), top)
				}
			}
		}
		switch rng.IntN(4) {
		case 0:
		case 1:
			b.Nominal = *resource.NewQuantity(from+rng.Int64N(top-from+1), resource.DecimalSI)
			st.between++
		case 2:
			b.Nominal = *resource.NewQuantity(rng.Int64N(from+1), resource.DecimalSI)
			st.lowered++
		default:
			st.dropped++
			continue
		}
		out.Budgets = append(out.Budgets, b)
	}
	return out
}

// checkEveryOutcome judges the write of name to spec on every way the
// reservations rs can land on tree, and fails t, naming the combination,
// where one refuses it: each reservation lands or not; several landed on
// one node land in a random order, the last one staying; a standing
// reservation (an UPDATE without a base) lands as a write it stands for
// (withinDraw), drawn anew for each combination, a few times each.
func checkEveryOutcome(t *testing.T, rng *rand.Rand, s *State, tree Tree, name string, spec *v1beta1.AcceleratorQuotaSpec, rs []v1beta1.Reservation, st *outcomeStats) {
	t.Helper()
	for mask := 0; mask < 1<<len(rs); mask++ {
		for range 3 {
			at := cloneTree(tree)
			order := rng.Perm(len(rs))
			for _, i := range order {
				r := rs[i]
				switch {
				case mask&(1<<i) == 0:
				case r.Spec == nil:
					delete(at, r.Node)
				case Standing(&r):
					at[r.Node] = withinDraw(rng, tree[r.Node], r.Spec, st)
				default:
					at[r.Node] = r.Spec
				}
			}
			st.combinations++
			if got := Admit(at, s.Marks(), s.FlavorNames(), s.Config(), name, spec); !got.Allowed {
				t.Fatalf("the write of %s, admitted on the bound of %s, is refused where %s land: %s\nstate:\n%s",
					name, describeReservations(rs), describeLanded(rs, mask, order), got.Message, s.Dump())
			}
		}
	}
}

func describeReservations(rs []v1beta1.Reservation) string {
	var out []string
	for _, r := range rs {
		kind := r.Operation
		if Standing(&r) {
			kind = "standing " + kind
		}
		if r.Spec != nil {
			kind += fmt.Sprintf(" (under %s, %d budgets)", parentOf(r.Node, r.Spec), len(r.Spec.Budgets))
		}
		out = append(out, kind+" "+r.Node)
	}
	return strings.Join(out, ", ")
}

func describeLanded(rs []v1beta1.Reservation, mask int, order []int) string {
	var out []string
	for _, i := range order {
		if mask&(1<<i) != 0 {
			out = append(out, rs[i].Operation+" "+rs[i].Node)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", then ")
}

// reshaped is sp with its budgets changed at random, as an update may:
// each raised, lowered or dropped, and now and then a pair added.
func reshaped(rng *rand.Rand, sp *v1beta1.AcceleratorQuotaSpec) *v1beta1.AcceleratorQuotaSpec {
	out := sp.DeepCopy()
	out.Budgets = nil
	for _, b := range sp.Budgets {
		switch rng.IntN(5) {
		case 0:
			continue
		case 1:
			b.Nominal = *resource.NewQuantity(b.Nominal.Value()/2, resource.DecimalSI)
		default:
			b.Nominal = *resource.NewQuantity(b.Nominal.Value()+rng.Int64N(6), resource.DecimalSI)
		}
		out.Budgets = append(out.Budgets, b)
	}
	if rng.IntN(4) == 0 {
		out.Budgets = append(out.Budgets, v1beta1.Budget{ResourceName: "nvidia.com/gpu", ResourceFlavor: "f1",
			Nominal: *resource.NewQuantity(rng.Int64N(8), resource.DecimalSI)})
	}
	return out
}

// TestDominatedBoundsEveryOutcome is the argument behind AdmitDominated,
// checked on random states: a write it admits beside up to seven reserved
// writes is admitted on every way they can land (checkEveryOutcome).
// The reservations are of every kind it bounds, near the write: standing
// raises and reshapes, updates, creates of teams and of Cohorts, a Cohort
// created with a team under it, deletes and moves of nodes nothing names,
// two writes of one node; and of kinds it must try one by one: an update
// of a Cohort that has children, a write of the written node.
func TestDominatedBoundsEveryOutcome(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 1205))
	runs, admitted, refused, declined := 400, 0, 0, 0
	var st outcomeStats
	if testing.Short() {
		runs = 80
	}
	for run := range runs {
		s := New()
		for _, ev := range genEvents(randomBytes(rng, rng.IntN(1500))) {
			s.Apply(ev)
		}
		tree := s.Tree()
		named := map[string]bool{}
		for n, sp := range tree {
			named[parentOf(n, sp)] = true
		}
		var leaves, cohorts, parents []string
		for _, n := range slices.Sorted(maps.Keys(tree)) {
			switch sp := tree[n]; {
			case n == v1beta1.RootName:
			case !named[n]:
				leaves = append(leaves, n)
			case sp.Role == v1beta1.RoleCohort:
				parents = append(parents, n)
			}
			if tree[n].Role == v1beta1.RoleCohort {
				cohorts = append(cohorts, n)
			}
		}
		if len(leaves) == 0 || len(cohorts) == 0 {
			continue
		}
		var ws []events.Event
		ws = append(ws, writesOf(genEvents(randomBytes(rng, 600)), rng)...)
		// Writes of the leaves' parents and siblings, scaled, meet the
		// reservations most.
		for _, n := range leaves {
			p := parentOf(n, tree[n])
			if sp := tree[p]; sp != nil && rng.IntN(3) == 0 {
				ws = append(ws, events.QuotaUpserted(t0, &events.Quota{Name: p, Spec: *scaledSpec(sp, func() int64 { return rng.Int64N(5) }, 2)}))
			}
			ws = append(ws, events.QuotaUpserted(t0, &events.Quota{Name: n, Spec: *scaledSpec(tree[n], func() int64 { return rng.Int64N(5) }, 2)}))
		}
		for _, w := range ws {
			wspec := specOfWrite(w)
			if !Admit(tree, s.Marks(), s.FlavorNames(), s.Config(), w.Key, wspec).Allowed {
				continue
			}
			// Near the write: the leaves under its parent, mostly.
			near := leaves
			home := cohorts[rng.IntN(len(cohorts))]
			if wspec != nil {
				home = parentOf(w.Key, wspec)
				var sib []string
				for _, n := range leaves {
					if parentOf(n, tree[n]) == home {
						sib = append(sib, n)
					}
				}
				if len(sib) > 0 && rng.IntN(4) > 0 {
					near = sib
				}
			}
			near = slices.DeleteFunc(slices.Clone(near), func(n string) bool { return n == w.Key })
			if len(near) == 0 {
				continue
			}
			rng.Shuffle(len(near), func(i, j int) { near[i], near[j] = near[j], near[i] })
			var rs []v1beta1.Reservation
			odd := rng.IntN(3) == 0 // kinds not to bound, up to four of them
			for k, tries := 1+rng.IntN(7), 0; len(rs) < k && tries < 50; tries++ {
				n := near[len(rs)%len(near)]
				kind := rng.IntN(9)
				if odd && len(rs) >= k-1-rng.IntN(4) {
					kind = 9 + rng.IntN(2)
				}
				fresh := fmt.Sprintf("new-%d", len(rs))
				switch kind {
				case 0, 1: // a standing raise or reshape
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Since: "1", Spec: reshaped(rng, tree[n])})
				case 2: // an update judged on a base
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Base: "1", Spec: reshaped(rng, tree[n])})
				case 3: // a create of a team or a Cohort
					sp := reshaped(rng, tree[near[rng.IntN(len(near))]])
					if rng.IntN(2) == 0 {
						sp.Role = v1beta1.RoleCohort
					}
					sp.ParentRef = &v1beta1.ParentReference{Name: home}
					rs = append(rs, v1beta1.Reservation{Node: fresh, Operation: "CREATE", Spec: sp})
				case 4: // a Cohort created with a team under it
					co := spec(v1beta1.RoleCohort, under(home), budget("nvidia.com/gpu", "f1", fmt.Sprint(rng.IntN(6))))
					team := spec(v1beta1.RoleClusterQueue, under(fresh), budget("nvidia.com/gpu", "f1", fmt.Sprint(rng.IntN(6))))
					rs = append(rs, v1beta1.Reservation{Node: fresh, Operation: "CREATE", Spec: co},
						v1beta1.Reservation{Node: fresh + "-t", Operation: "CREATE", Spec: team})
				case 5:
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "DELETE", Base: "1"})
				case 6: // a move
					sp := reshaped(rng, tree[n])
					sp.ParentRef = &v1beta1.ParentReference{Name: cohorts[rng.IntN(len(cohorts))]}
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Base: "1", Spec: sp})
				case 7: // a second write of a node reserved already
					if len(rs) == 0 {
						continue
					}
					prev := rs[rng.IntN(len(rs))]
					sp := tree[prev.Node]
					if prev.Spec != nil {
						sp = prev.Spec
					}
					if sp == nil || rng.IntN(3) == 0 {
						rs = append(rs, v1beta1.Reservation{Node: prev.Node, Operation: "DELETE", Base: "2"})
					} else {
						rs = append(rs, v1beta1.Reservation{Node: prev.Node, Operation: prev.Operation, Base: "2", Spec: reshaped(rng, sp)})
					}
				case 8: // a lowering's standing reservation
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Since: "1", Spec: scaledSpec(tree[n], func() int64 { return rng.Int64N(2) }, 2)})
				case 9: // an update of a Cohort with children
					if len(parents) == 0 {
						continue
					}
					c := parents[rng.IntN(len(parents))]
					rs = append(rs, v1beta1.Reservation{Node: c, Operation: "UPDATE", Base: "1", Spec: scaledSpec(tree[c], func() int64 { return 1 + rng.Int64N(4) }, 2)})
				default: // a write of the written node, on another base
					if tree[w.Key] == nil || wspec == nil {
						continue
					}
					rs = append(rs, v1beta1.Reservation{Node: w.Key, Operation: "UPDATE", Base: "1", Spec: reshaped(rng, tree[w.Key])})
				}
			}
			a, ok := AdmitDominated(tree, s.Marks(), s.FlavorNames(), s.Config(), w.Key, wspec, rs)
			switch {
			case !ok && a.Allowed:
				t.Fatalf("run %d: AdmitDominated reported false with an admission", run)
			case !ok && a.Message == "":
				declined++
				continue
			case !ok:
				refused++
				continue
			}
			admitted++
			checkEveryOutcome(t, rng, s, tree, w.Key, wspec, rs, &st)
		}
	}
	t.Logf("writes admitted on the bound and checked on %d outcomes: %d; refused on the bound: %d; not bounded: %d; standing writes with a budget between the node's and the reservation's: %d, below: %d, dropped: %d",
		st.combinations, admitted, refused, declined, st.between, st.lowered, st.dropped)
	if admitted < runs*3/4 || refused < runs/10 || declined < runs/20 || min(st.between, st.dropped, st.lowered) < runs*10 {
		t.Errorf("too few cases of some kind in %d runs to say anything", runs)
	}
}

// TestDominatedOnTightBudgets is TestDominatedBoundsEveryOutcome on small
// trees where the writes and the reservations meet under one Cohort whose
// budget they nearly fill, so that a bound that left out the largest
// outcome would be caught admitting a write that one refuses: the write
// raises, creates or deletes a team, or changes the Cohort; the
// reservations raise, reshape, create (a team, an empty Cohort, a Cohort
// with a team), delete or move the Cohort's other children.
func TestDominatedOnTightBudgets(t *testing.T) {
	s := guideState(t)
	marks, flavors, cfg := s.Marks(), s.FlavorNames(), s.Config()
	rng := rand.New(rand.NewPCG(2026, 1206))
	gpu := func(n int64) specOpt { return budget("nvidia.com/gpu", "a100", fmt.Sprint(n)) }
	team := func(parent string, n int64) *v1beta1.AcceleratorQuotaSpec {
		return spec(v1beta1.RoleClusterQueue, under(parent), gpu(n))
	}
	trials, admitted, refused := 3000, 0, 0
	var st outcomeStats
	if testing.Short() {
		trials = 600
	}
	for trial := range trials {
		tree := Tree{
			"root":        spec(v1beta1.RoleCohort),
			"ml-research": spec(v1beta1.RoleCohort, under("root"), gpu(10+rng.Int64N(20))),
			"other":       spec(v1beta1.RoleCohort, under("root"), gpu(10+rng.Int64N(20))),
		}
		const kids = 6
		for i := range kids {
			tree[fmt.Sprintf("t%d", i)] = team("ml-research", rng.Int64N(7))
		}
		nominal := func(n string) int64 { return tree[n].Budgets[0].Nominal.Value() }
		var wName string
		var wSpec *v1beta1.AcceleratorQuotaSpec
		switch rng.IntN(5) {
		case 0, 1:
			wName = fmt.Sprintf("t%d", rng.IntN(kids))
			wSpec = team("ml-research", rng.Int64N(12))
		case 2:
			wName, wSpec = "w-new", team("ml-research", rng.Int64N(8))
		case 3:
			wName, wSpec = "ml-research", spec(v1beta1.RoleCohort, under("root"), gpu(5+rng.Int64N(25)))
		default:
			wName, wSpec = fmt.Sprintf("t%d", rng.IntN(kids)), nil
		}
		if !Admit(tree, marks, flavors, cfg, wName, wSpec).Allowed {
			continue
		}
		var rs []v1beta1.Reservation
		for i := range kids {
			n := fmt.Sprintf("t%d", i)
			if n == wName || rng.IntN(3) == 0 {
				continue
			}
			switch rng.IntN(8) {
			case 0, 1:
				rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Since: "1", Spec: team("ml-research", nominal(n)+rng.Int64N(5))})
			case 2:
				rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Base: "1",
					Spec: spec(v1beta1.RoleClusterQueue, under("ml-research"), gpu(nominal(n)+rng.Int64N(3)-1), budget("nvidia.com/gpu", "h100", "3"))})
			case 3:
				rs = append(rs, v1beta1.Reservation{Node: n, Operation: "DELETE", Base: "1"})
			case 4:
				rs = append(rs, v1beta1.Reservation{Node: "r-" + n, Operation: "CREATE", Spec: team("ml-research", rng.Int64N(6))})
			case 5:
				rs = append(rs, v1beta1.Reservation{Node: "c-" + n, Operation: "CREATE", Spec: spec(v1beta1.RoleCohort, under("ml-research"), gpu(rng.Int64N(4)))})
			case 6:
				rs = append(rs, v1beta1.Reservation{Node: "c-" + n, Operation: "CREATE", Spec: spec(v1beta1.RoleCohort, under("ml-research"), gpu(rng.Int64N(4)))},
					v1beta1.Reservation{Node: "c-" + n + "-t", Operation: "CREATE", Spec: team("c-"+n, rng.Int64N(4))})
			default:
				// A move to the other Cohort, or into this one's new child.
				rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Base: "1", Spec: team("other", nominal(n)+rng.Int64N(3))})
			}
		}
		if tree[wName] != nil && wName != "ml-research" && rng.IntN(8) == 0 {
			// A write of the written node itself, on another base.
			rs = append(rs, v1beta1.Reservation{Node: wName, Operation: "UPDATE", Base: "1", Spec: team("ml-research", nominal(wName)+1+rng.Int64N(4))})
		} else if rng.IntN(4) == 0 && len(rs) > 0 {
			// The Cohort's own raise or lowering, tried one by one.
			rs = append(rs, v1beta1.Reservation{Node: "ml-research", Operation: "UPDATE", Base: "1", Spec: spec(v1beta1.RoleCohort, under("root"), gpu(5+rng.Int64N(25)))})
		}
		a, ok := AdmitDominated(tree, marks, flavors, cfg, wName, wSpec, rs)
		if !ok {
			if a.Message != "" {
				refused++
			}
			continue
		}
		admitted++
		checkEveryOutcome(t, rng, s, tree, wName, wSpec, rs, &st)
		_ = trial
	}
	t.Logf("writes admitted on the bound and checked on %d outcomes: %d; refused on the bound: %d; standing writes with a budget between: %d, below: %d, dropped: %d",
		st.combinations, admitted, refused, st.between, st.lowered, st.dropped)
	if admitted < trials/10 || refused < trials/20 || st.between < 100 || st.dropped < 100 {
		t.Errorf("%d admitted and %d refused on the bound in %d trials: too few to say anything", admitted, refused, trials)
	}
}

// TestDominatedNodeWithChildrenKeepsItsParent: a node that reserved
// writes put children under cannot be laid on the bound under two
// parents, as a node without children can: its children's places hang
// on its. Here X is reserved as a Cohort under p1 and, by another review,
// under p2, which does not exist yet, with a team T reserved under X; the
// write creates p2 one level below the deepest a node may sit but two.
// Where X lands under p2, T sits one level too deep: the write must be
// refused, as it is on every combination tried one by one.
func TestDominatedNodeWithChildrenKeepsItsParent(t *testing.T) {
	gpu := budget("nvidia.com/gpu", "a100", "1")
	tree := Tree{
		"root": spec(v1beta1.RoleCohort),
		"p1":   spec(v1beta1.RoleCohort, under("root")),
		"d1":   spec(v1beta1.RoleCohort, under("root")),
		"d2":   spec(v1beta1.RoleCohort, under("d1")),
		"d3":   spec(v1beta1.RoleCohort, under("d2")),
	}
	cfg := events.DefaultConfig()
	cfg.MaxTreeDepth = 5
	flavors := map[string]bool{"a100": true}
	marks := map[Pair]Amount{{"nvidia.com/gpu", "a100"}: 100000}
	rs := []v1beta1.Reservation{
		{Node: "x", Operation: "CREATE", Spec: spec(v1beta1.RoleCohort, under("p1"))},
		{Node: "x", Operation: "CREATE", Spec: spec(v1beta1.RoleCohort, under("p2"))},
		{Node: "x-t", Operation: "CREATE", Spec: spec(v1beta1.RoleClusterQueue, under("x"), gpu)},
		{Node: "other", Operation: "CREATE", Spec: spec(v1beta1.RoleClusterQueue, under("p1"), gpu)},
	}
	p2 := spec(v1beta1.RoleCohort, under("d3"))
	a, ok := AdmitDominated(tree, marks, flavors, cfg, "p2", p2, rs)
	if ok || !strings.Contains(a.Message, "x-t") || !strings.Contains(a.Message, "exceeding the configured maximum") {
		t.Fatalf("AdmitDominated = %+v, %v: want a refusal of x-t's depth", a, ok)
	}
	with := cloneTree(tree)
	with["x"], with["x-t"] = rs[1].Spec, rs[2].Spec
	if Admit(with, marks, flavors, cfg, "p2", p2).Allowed {
		t.Fatal("the combination the test is about admits the write: it proves nothing")
	}
}

// scaledSpec is sp with each budget's nominal times num()/den, rounded
// down, num drawn again for each budget.
func scaledSpec(sp *v1beta1.AcceleratorQuotaSpec, num func() int64, den int64) *v1beta1.AcceleratorQuotaSpec {
	out := sp.DeepCopy()
	for i := range out.Budgets {
		n := out.Budgets[i].Nominal.Value() * num() / den
		out.Budgets[i].Nominal = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out
}
