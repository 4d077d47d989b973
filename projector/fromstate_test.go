package projector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// cluster is the events of a cluster with ml-serving enrolled, one Node of
// gpus GPUs on flavor a100, synced, and the tree of quotas.
func cluster(t0 time.Time, gpus string, quotas []*v1beta1.AcceleratorQuota) []events.Event {
	c := events.DefaultConfig()
	c.EnrolledNamespaces = []string{"ml-serving"}
	capacity := map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse(gpus)}
	evs := []events.Event{events.ConfigChanged(t0, c),
		events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}),
		events.NodeUpserted(t0, &events.Node{Name: "n1", Labels: map[string]string{"gpu": "a100"}, Capacity: capacity, Allocatable: capacity, Ready: true}),
		events.Synced(t0)}
	for _, aq := range quotas {
		evs = append(evs, events.QuotaUpserted(t0, &events.Quota{Name: aq.Name, Generation: 1, Spec: aq.Spec}))
	}
	return evs
}

// Materialized follows the outcomes the state holds, from their events: a
// replayed log gives the statuses the leader wrote.
func TestStatusReadsOutcomeFromState(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	s := state.New()
	evs := cluster(t0, "32", append([]*v1beta1.AcceleratorQuota{aqtest.Root().Obj()}, aqtest.GuideTree()...))
	evs = append(evs,
		events.LeadershipChanged(t0, "m1", events.LeadershipAcquired),
		events.OutcomeReported(t0, "team-alpha", events.Outcome{Kind: events.OutcomeApplied}),
		events.OutcomeReported(t0, "team-beta", events.Outcome{Kind: events.OutcomeConflict, Message: "ClusterQueue team-beta exists without the label"}))
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
		s.Apply(ev)
	}
	materialized := func() map[string]string {
		c := s.Config()
		out := Project(FromState(s, c.EnrolledNamespaces, CoverResources(c.CoverResources)))
		got := map[string]string{}
		for name, st := range out.Statuses {
			for _, cd := range st.Conditions {
				if cd.Type == v1beta1.ConditionMaterialized {
					got[name] = string(cd.Status) + " " + cd.Reason
				}
			}
		}
		return got
	}
	require.Equal(t, map[string]string{
		"root": "False Pending", "ml-research": "False Pending",
		"team-alpha": string(metav1.ConditionTrue) + " Admitted", "team-beta": "False ObjectConflict",
	}, materialized())
	n, ok := NodeFromState(s, "team-beta")
	require.True(t, ok)
	require.Equal(t, "ClusterQueue team-beta exists without the label", ProjectNode(&n, Settings(s, []string{"ml-serving"}, nil)).Status.Conditions[2].Message)

	// Leadership lost: the replica writes nothing, and its state holds no
	// outcome any more.
	ev := events.LeadershipChanged(t0, "m1", events.LeadershipLost)
	ev.Seq = uint64(len(evs) + 1)
	s.Apply(ev)
	require.Equal(t, "False Pending", materialized()["team-alpha"])
}

// A pass reads its node before the applier reports, and the report may
// flip Materialized: Reported takes the new outcome with the stamp the
// state dated it with, so the status written is the one a replay prints.
func TestReportedTakesTheOutcomesStamp(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	s := state.New()
	evs := cluster(t0, "8", []*v1beta1.AcceleratorQuota{aqtest.Root().Obj(), aqtest.Team("team-alpha", "root").Budget("nvidia.com/gpu", "a100", "2").Obj()})
	evs = append(evs, events.LeadershipChanged(t0, "m1", events.LeadershipAcquired))
	seq := uint64(0)
	apply := func(ev events.Event) {
		seq++
		ev.Seq = seq
		s.Apply(ev)
	}
	for _, ev := range evs {
		apply(ev)
	}
	n, ok := NodeFromState(s, "team-alpha")
	require.True(t, ok)
	apply(events.OutcomeReported(t1, "team-alpha", events.Outcome{Kind: events.OutcomeApplied}))
	in := Settings(s, []string{"ml-serving"}, nil)
	stale := ProjectStatus(&n, in)
	n.Reported(s)
	st := ProjectStatus(&n, in)
	stamp := func(st *v1beta1.AcceleratorQuotaStatus, typ string) (string, time.Time) {
		for _, cd := range st.Conditions {
			if cd.Type == typ {
				return string(cd.Status), cd.LastTransitionTime.UTC()
			}
		}
		t.Fatalf("no %s condition in %+v", typ, st.Conditions)
		return "", time.Time{}
	}
	status, at := stamp(stale, v1beta1.ConditionMaterialized)
	require.Equal(t, []any{"False", t0}, []any{status, at}, "before the report")
	status, at = stamp(st, v1beta1.ConditionMaterialized)
	require.Equal(t, []any{"True", t1}, []any{status, at}, "Materialized, as reported")
	status, at = stamp(st, v1beta1.ConditionReady)
	require.Equal(t, []any{"True", t0}, []any{status, at}, "Ready stands since the creation")
	// The replay's view: the same status from the state alone.
	replayed, ok := NodeFromState(s, "team-alpha")
	require.True(t, ok)
	require.Equal(t, ProjectStatus(&replayed, in), st)
}
