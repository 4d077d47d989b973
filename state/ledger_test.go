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

// TestDominatedBoundsEveryOutcome is the argument behind AdmitDominated,
// checked on random states: a write it admits beside up to six reserved
// raises, creates and deletes of teams is admitted on every combination of
// them landing, with each raise landing at its spec or, as a standing
// reservation's writes may, at any spec within it.
func TestDominatedBoundsEveryOutcome(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 1205))
	runs, admitted, refused, declined := 400, 0, 0, 0
	if testing.Short() {
		runs = 80
	}
	for run := range runs {
		s := New()
		for _, ev := range genEvents(randomBytes(rng, rng.IntN(1500))) {
			s.Apply(ev)
		}
		tree := s.Tree()
		var teams, cohorts []string
		for n, sp := range tree {
			switch {
			case SameSeat(n, sp, sp):
				teams = append(teams, n)
			case sp.Role == v1beta1.RoleCohort:
				cohorts = append(cohorts, n)
			}
		}
		if len(teams) == 0 || len(cohorts) == 0 {
			continue
		}
		slices.Sort(teams)
		slices.Sort(cohorts)
		var ws []events.Event
		for _, w := range writesOf(genEvents(randomBytes(rng, 600)), rng) {
			ws = append(ws, w)
		}
		// Writes of the teams' parents and siblings, scaled, meet the
		// reservations most.
		for _, n := range teams {
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
			// The reservations are mostly on the write's siblings, where
			// they meet it; some are of a kind AdmitDominated must not
			// bound (a lowering, a move, a Cohort's raise).
			near := teams
			if wspec != nil {
				var sib []string
				for _, n := range teams {
					if parentOf(n, tree[n]) == parentOf(w.Key, wspec) {
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
			odd := rng.IntN(4) == 0 // one reservation of a kind not to bound
			for k := 1 + rng.IntN(6); len(rs) < k; {
				n := near[len(rs)%len(near)]
				kind := rng.IntN(5)
				if odd && len(rs) == k-1 {
					kind = 5 + rng.IntN(3)
				}
				switch kind {
				case 0, 1, 2:
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Spec: scaledSpec(tree[n], func() int64 { return 2 + rng.Int64N(3) }, 2)})
				case 3:
					sp := tree[n].DeepCopy()
					if wspec != nil && rng.IntN(2) == 0 {
						sp.ParentRef = &v1beta1.ParentReference{Name: parentOf(w.Key, wspec)}
					} else {
						sp.ParentRef = &v1beta1.ParentReference{Name: cohorts[rng.IntN(len(cohorts))]}
					}
					rs = append(rs, v1beta1.Reservation{Node: fmt.Sprintf("new-%d", len(rs)), Operation: "CREATE", Spec: sp})
				case 4:
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "DELETE"})
				case 5:
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Spec: scaledSpec(tree[n], func() int64 { return rng.Int64N(2) }, 2)})
				case 6:
					sp := tree[n].DeepCopy()
					sp.ParentRef = &v1beta1.ParentReference{Name: cohorts[rng.IntN(len(cohorts))]}
					rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Spec: sp})
				default:
					c := cohorts[rng.IntN(len(cohorts))]
					rs = append(rs, v1beta1.Reservation{Node: c, Operation: "UPDATE", Spec: scaledSpec(tree[c], func() int64 { return 2 + rng.Int64N(4) }, 2)})
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
			for mask := 0; mask < 1<<len(rs); mask++ {
				at := cloneTree(tree)
				for i, r := range rs {
					switch {
					case mask&(1<<i) == 0:
					case r.Spec == nil:
						delete(at, r.Node)
					case r.Operation == "UPDATE" && rng.IntN(2) == 0:
						at[r.Node] = scaledSpec(r.Spec, func() int64 { return rng.Int64N(5) }, 4)
					default:
						at[r.Node] = r.Spec
					}
				}
				if got := Admit(at, s.Marks(), s.FlavorNames(), s.Config(), w.Key, wspec); !got.Allowed {
					t.Fatalf("run %d: the write of %s admitted on the bounding combination of %v, refused on combination %b: %s\nstate:\n%s",
						run, w.Key, describeReservations(rs), mask, got.Message, s.Dump())
				}
			}
		}
	}
	t.Logf("writes admitted on the bound and checked on every combination: %d; refused on the bound: %d; not bounded: %d", admitted, refused, declined)
	if admitted < 200 || refused < 20 || declined < 20 {
		t.Errorf("the generator gave %d admitted, %d refused, %d not bounded: too few to say anything", admitted, refused, declined)
	}
}

func describeReservations(rs []v1beta1.Reservation) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Operation+" "+r.Node)
	}
	return strings.Join(out, ", ")
}

// TestDominatedOnTightBudgets is TestDominatedBoundsEveryOutcome on small
// trees where the writes and the reservations meet under one Cohort whose
// budget they nearly fill, so that a bound that left out the largest
// combination would be caught admitting a write that one refuses.
func TestDominatedOnTightBudgets(t *testing.T) {
	s := guideState(t)
	marks, flavors, cfg := s.Marks(), s.FlavorNames(), s.Config()
	rng := rand.New(rand.NewPCG(2026, 1206))
	gpu := func(n int64) specOpt { return budget("nvidia.com/gpu", "a100", fmt.Sprint(n)) }
	team := func(parent string, n int64) *v1beta1.AcceleratorQuotaSpec {
		return spec(v1beta1.RoleClusterQueue, under(parent), gpu(n))
	}
	trials, admitted, refused := 3000, 0, 0
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
			switch rng.IntN(4) {
			case 0, 1:
				rs = append(rs, v1beta1.Reservation{Node: n, Operation: "UPDATE", Spec: team("ml-research", nominal(n)+rng.Int64N(5))})
			case 2:
				rs = append(rs, v1beta1.Reservation{Node: n, Operation: "DELETE"})
			default:
				rs = append(rs, v1beta1.Reservation{Node: "r-" + n, Operation: "CREATE", Spec: team("ml-research", rng.Int64N(6))})
			}
		}
		if tree[wName] != nil && wName != "ml-research" && rng.IntN(8) == 0 {
			// A raise of the written node itself bounds nothing either.
			rs = append(rs, v1beta1.Reservation{Node: wName, Operation: "UPDATE", Spec: team("ml-research", nominal(wName)+1+rng.Int64N(4))})
		} else if rng.IntN(4) == 0 && len(rs) > 0 {
			// One of a kind that bounds nothing: a lowering, a move, a
			// Cohort's raise.
			i := rng.IntN(len(rs))
			switch n := rs[i].Node; {
			case tree[n] == nil:
				rs[i] = v1beta1.Reservation{Node: "other", Operation: "UPDATE", Spec: spec(v1beta1.RoleCohort, under("root"), gpu(40))}
			case rng.IntN(2) == 0 && nominal(n) > 0:
				rs[i] = v1beta1.Reservation{Node: n, Operation: "UPDATE", Spec: team("ml-research", nominal(n)-1)}
			default:
				rs[i] = v1beta1.Reservation{Node: n, Operation: "UPDATE", Spec: team("other", nominal(n))}
			}
		}
		a, ok := AdmitDominated(tree, marks, flavors, cfg, wName, wSpec, rs)
		if !ok {
			if a.Message != "" {
				refused++
			}
			continue
		}
		admitted++
		for mask := 0; mask < 1<<len(rs); mask++ {
			at := cloneTree(tree)
			for i, r := range rs {
				switch {
				case mask&(1<<i) == 0:
				case r.Spec == nil:
					delete(at, r.Node)
				case r.Operation == "UPDATE" && rng.IntN(2) == 0 && r.Spec.Role == v1beta1.RoleClusterQueue:
					// A standing reservation's write, within its spec.
					at[r.Node] = team(parentOf(r.Node, r.Spec), rng.Int64N(r.Spec.Budgets[0].Nominal.Value()+1))
				default:
					at[r.Node] = r.Spec
				}
			}
			if got := Admit(at, marks, flavors, cfg, wName, wSpec); !got.Allowed {
				t.Fatalf("trial %d: the write of %s admitted on the bounding combination of %s, refused on combination %b: %s",
					trial, wName, describeReservations(rs), mask, got.Message)
			}
		}
	}
	t.Logf("writes admitted on the bound and checked on every combination: %d; refused on the bound: %d", admitted, refused)
	if admitted < trials/10 || refused < trials/20 {
		t.Errorf("%d admitted and %d refused on the bound in %d trials: too few to say anything", admitted, refused, trials)
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
