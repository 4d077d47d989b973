package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/events"
)

// checkInvariants compares everything the state keeps incrementally with a
// computation from scratch, and checks the tree's invariants. It returns
// the first problem found.
func checkInvariants(s *State) error {
	// Capacity: the tallies equal a recount from the nodes.
	fresh := New()
	fresh.cfg = s.cfg
	fresh.flavors = s.flavors
	for name, m := range s.hosts {
		var flavors []string
		for f, want := range s.flavors {
			if matches(want, m.rec.Labels) {
				flavors = append(flavors, f)
			}
		}
		slices.Sort(flavors)
		if !slices.Equal(flavors, m.flavors) {
			return fmt.Errorf("node %s matches flavors %v, but the state has %v", name, flavors, m.flavors)
		}
		cm := *m
		fresh.hosts[name] = &cm
	}
	// DRA: the pools' contributions computed again from the slices and
	// classes, and the tallies recounted from them.
	for name, c := range s.dra.classes {
		fresh.dra.classes[name] = c
	}
	for name, sl := range s.dra.slices {
		fresh.dra.slices[name] = sl
		k := poolKey{sl.Driver, sl.Pool}
		if fresh.dra.pools[k] == nil {
			fresh.dra.pools[k] = &draPool{slices: map[string]*events.ResourceSlice{}}
		}
		fresh.dra.pools[k].slices[name] = sl
	}
	fresh.draRebuild()
	if diff := cmp.Diff(fresh.dra.nodes, s.dra.nodes, cmp.AllowUnexported(listed{})); diff != "" {
		return fmt.Errorf("DRA node amounts differ from a recount (-recount +state):\n%s", diff)
	}
	if diff := cmp.Diff(fresh.dra.strays, s.dra.strays); diff != "" {
		return fmt.Errorf("unattributed DRA capacity differs from a recount (-recount +state):\n%s", diff)
	}
	if diff := cmp.Diff(fresh.dra.unbudget, s.dra.unbudget); diff != "" {
		return fmt.Errorf("unbudgeted devices differ from a recount (-recount +state):\n%s", diff)
	}
	if fresh.dra.errors != s.dra.errors || !slices.Equal(fresh.dra.res, s.dra.res) {
		return fmt.Errorf("DRA errors %d, resources %v; a recount gives %d, %v", s.dra.errors, s.dra.res, fresh.dra.errors, fresh.dra.res)
	}
	if diff := cmp.Diff(talliesOf(fresh), talliesOf(s), cmp.AllowUnexported(tally{})); diff != "" {
		return fmt.Errorf("incremental tallies differ from a recount (-recount +state):\n%s", diff)
	}
	if diff := cmp.Diff(fresh.unattributed, s.unattributed); diff != "" {
		return fmt.Errorf("unattributed differs from a recount (-recount +state):\n%s", diff)
	}
	if diff := cmp.Diff(fresh.strays, s.strays); diff != "" {
		return fmt.Errorf("unattributed nodes differ from a recount (-recount +state):\n%s", diff)
	}

	// The tree's indexes equal a rebuild.
	kids, sums := map[string][]string{}, map[string]map[Pair]Total{}
	byPair, byFlavor := map[Pair]map[string]struct{}{}, map[string]map[string]struct{}{}
	for _, name := range sortedKeys(s.members) {
		m := s.members[name]
		if !m.shape.equal(shapeOf(name, m.spec)) {
			return fmt.Errorf("node %s: kept shape differs from its spec's", name)
		}
		if p := m.shape.parent; p != "" {
			kids[p] = append(kids[p], name)
			if sums[p] == nil {
				sums[p] = map[Pair]Total{}
			}
			for _, b := range m.shape.budgets {
				sums[p][b.Pair] = sums[p][b.Pair].Add(b.Nominal)
			}
		}
		for _, b := range m.shape.budgets {
			addIndex(byPair, b.Pair, name)
			addIndex(byFlavor, b.Flavor, name)
		}
	}
	for p, ps := range sums {
		maps.DeleteFunc(ps, func(_ Pair, a Total) bool { return a.IsZero() })
		if len(ps) == 0 {
			delete(sums, p)
		}
	}
	for what, pair := range map[string][2]any{"children": {kids, s.kids}, "sums": {sums, s.sums}, "pair index": {byPair, s.byPair}, "flavor index": {byFlavor, s.byFlavor}} {
		if diff := cmp.Diff(pair[0], pair[1]); diff != "" {
			return fmt.Errorf("%s differ from a rebuild (-rebuild +state):\n%s", what, diff)
		}
	}

	// Places and violations equal the rule book applied from scratch.
	places := Places(s.Tree())
	for name, m := range s.members {
		if !places[name].Equal(m.place) {
			return fmt.Errorf("node %s: place %s, from scratch %s", name, placeString(m.place), placeString(places[name]))
		}
	}
	if diff := cmp.Diff(Evaluate(s.Tree(), s.Marks(), s.FlavorNames(), s.cfg), s.Violations()); diff != "" {
		return fmt.Errorf("violations differ from Evaluate (-evaluate +state):\n%s", diff)
	}

	// Phases: each node's follows from its violations and its nearest
	// broken ancestor; no Ready node has a non-Ready
	// ancestor.
	for _, name := range sortedKeys(s.members) {
		m := s.members[name]
		by, as := "", Reason("")
		if m.place.Reason == "" {
			for cur := m.shape.parent; cur != ""; cur = s.members[cur].shape.parent {
				if a := s.members[cur]; len(a.viols) > 0 {
					by, as = cur, a.viols[0].Reason
					break
				}
			}
		}
		if by != m.frozenBy || as != m.frozenAs {
			return fmt.Errorf("node %s: frozen by %q (%s), from scratch %q (%s)", name, m.frozenBy, m.frozenAs, by, as)
		}
		phase, _, msg := m.settled()
		if phase != m.phase || msg != m.message {
			return fmt.Errorf("node %s: phase %s message %q, want %s %q", name, m.phase, m.message, phase, msg)
		}
		if m.phase == PhaseReady {
			for cur := m.shape.parent; cur != ""; cur = s.members[cur].shape.parent {
				if a := s.members[cur]; a.phase != PhaseReady {
					return fmt.Errorf("node %s is Ready under %s, which is %s", name, cur, a.phase)
				}
			}
		}
	}
	return nil
}

func talliesOf(s *State) map[string]tally {
	out := map[string]tally{}
	for p, t := range s.tallies {
		out[p.String()] = *t
	}
	return out
}

// replayCheck applies log to a fresh state through the encoding and
// compares the dumps: the same events give the same state.
func replayCheck(s *State, log []events.Event) error {
	r := New()
	for _, ev := range log {
		b, err := events.Marshal(ev)
		if err != nil {
			return err
		}
		dec, err := events.Unmarshal(b)
		if err != nil {
			return err
		}
		r.Apply(dec)
	}
	if a, b := s.Dump(), r.Dump(); a != b {
		return fmt.Errorf("replaying the log gives another state:\n%s", lineDiff(a, b))
	}
	if a, b := s.Dump(), s.Clone().Dump(); a != b {
		return fmt.Errorf("a clone dumps differently:\n%s", lineDiff(a, b))
	}
	return nil
}

func lineDiff(a, b string) string {
	return cmp.Diff(strings.Split(a, "\n"), strings.Split(b, "\n"))
}
