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
