package state

import (
	"maps"
	"math/rand/v2"
	"testing"

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
		data := make([]byte, rng.IntN(1500))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		s := New()
		for _, ev := range genEvents(data) {
			s.Apply(ev)
		}
		more := make([]byte, 600)
		for i := range more {
			more[i] = byte(rng.UintN(256))
		}
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
