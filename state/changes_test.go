package state

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

func TestTakeChanges(t *testing.T) {
	s := guideState(t)
	if c := s.TakeChanges(); !c.All {
		t.Fatalf("after Synced: %+v, want All", c)
	}
	if c := s.TakeChanges(); !c.Empty() {
		t.Fatalf("taken twice: %+v", c)
	}
	usage := func(n string) events.Event {
		return events.QueueUpserted(t0, &events.Queue{Name: "team-beta", Managed: true, Usage: []events.Usage{
			{Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse(n)}}})
	}
	tree := guideTree()
	raised := tree["team-alpha"].DeepCopy()
	raised.Budgets[0].Nominal = resource.MustParse("20")
	steps := []struct {
		name string
		ev   events.Event
		want Changes
	}{
		{"a ClusterQueue's first status, with no usage", events.QueueUpserted(t0, &events.Queue{Name: "team-alpha", Managed: true}), Changes{}},
		{"a team's usage", usage("4"), Changes{Nodes: []string{"team-beta"}}},
		{"the same usage again (Kueue rewrote its status)", usage("4"), Changes{}},
		{"a Node: root's capacity", events.NodeUpserted(t0, &events.Node{Name: "n5", Labels: map[string]string{"gpu": "a100"}, Ready: true}), Changes{Nodes: []string{"root"}}},
		{"a budget that breaks containment: the team and its parent", quota("team-alpha", raised), Changes{Nodes: []string{"ml-research", "team-alpha", "team-beta"}}},
		{"the same generation again (a status written back)", quota("team-alpha", raised), Changes{}},
		{"a new generation", events.QuotaUpserted(t0, &events.Quota{Name: "team-alpha", Generation: 2, Spec: *raised}), Changes{Nodes: []string{"team-alpha"}}},
		{"a deleted team", events.Deleted(t0, events.KindAcceleratorQuota, "team-alpha"), Changes{Nodes: []string{"ml-research", "team-alpha", "team-beta"}}},
		{"the configuration", events.ConfigChanged(t0, events.Config{EnrolledNamespaces: []string{"a"}}), Changes{All: true}},
		{"a tick", events.Tick(t0), Changes{Nodes: []string{v1beta1.RootName}}},
	}
	for _, st := range steps {
		applyAll(s, st.ev)
		if diff := cmp.Diff(st.want, s.TakeChanges()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestRevision: a node's Revision moves with every event that may change
// its projection (the nodes Changes names, every node on All), with a new
// outcome of the applier and with a change of leadership, and with
// nothing else; it is the same for the same events in a fresh state.
func TestRevision(t *testing.T) {
	s := guideState(t)
	s.TakeChanges()
	names := []string{"ml-research", "root", "team-alpha", "team-beta"}
	revs := func(s *State) map[string]uint64 {
		out := map[string]uint64{}
		for _, n := range names {
			if r, ok := s.Revision(n); ok {
				out[n] = r
			}
		}
		return out
	}
	tree := guideTree()
	raised := tree["team-alpha"].DeepCopy()
	raised.Budgets[0].Nominal = resource.MustParse("20")
	applied := events.Outcome{Kind: events.OutcomeApplied}
	steps := []struct {
		name  string
		ev    events.Event
		moved []string
	}{
		{"a team's usage", events.QueueUpserted(t0, &events.Queue{Name: "team-beta", Managed: true, Usage: []events.Usage{
			{Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse("4")}}}), []string{"team-beta"}},
		{"a Node: root's capacity", events.NodeUpserted(t0, &events.Node{Name: "n5", Labels: map[string]string{"gpu": "a100"}, Ready: true}), []string{"root"}},
		{"the applier's outcome on a team", events.OutcomeReported(t0, "team-alpha", applied), []string{"team-alpha"}},
		{"the same outcome again", events.OutcomeReported(t0, "team-alpha", applied), nil},
		{"a budget that breaks containment", quota("team-alpha", raised), []string{"ml-research", "team-alpha", "team-beta"}},
		{"a status written back (same generation)", quota("team-alpha", raised), nil},
		{"a tick: root's capacity", events.Tick(t0), []string{"root"}},
		{"a change of leadership: every outcome goes", events.LeadershipChanged(t0, "r1", events.LeadershipAcquired), names},
		{"the configuration", events.ConfigChanged(t0, events.Config{EnrolledNamespaces: []string{"a"}}), names},
	}
	var evs []events.Event
	for _, st := range steps {
		before := revs(s)
		applyAll(s, st.ev)
		evs = append(evs, st.ev)
		after := revs(s)
		var moved []string
		for _, n := range names {
			if after[n] < before[n] {
				t.Errorf("%s: the Revision of %s went back from %d to %d", st.name, n, before[n], after[n])
			}
			if after[n] != before[n] {
				moved = append(moved, n)
			}
		}
		if diff := cmp.Diff(st.moved, moved); diff != "" {
			t.Errorf("%s: nodes whose Revision moved (-want +got):\n%s", st.name, diff)
		}
	}
	for _, nr := range s.Revisions() {
		if r, _ := s.Revision(nr.Name); r != nr.Revision {
			t.Errorf("Revisions lists %s at %d, Revision says %d", nr.Name, nr.Revision, r)
		}
	}
	if n := len(s.Revisions()); n != len(s.Nodes()) {
		t.Errorf("Revisions lists %d nodes, the state holds %d", n, len(s.Nodes()))
	}
	if _, ok := s.Revision("no-such-node"); ok {
		t.Error("a Revision for a node the state does not hold")
	}
	again := guideState(t)
	applyAll(again, evs...)
	if diff := cmp.Diff(revs(s), revs(again)); diff != "" {
		t.Errorf("the same events in a fresh state give other Revisions (-first +second):\n%s", diff)
	}
}
