package replay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// --state reports the statuses from the recorded outcomes while a replica
// leads, and says so when none does: a follower's log, or the end of a
// lead.
func TestStateShowsMaterializedFromOutcomes(t *testing.T) {
	base := func(extra ...events.Event) []events.Event {
		cfg := events.DefaultConfig()
		cfg.EnrolledNamespaces = []string{"ml"}
		evs := []events.Event{events.ConfigChanged(t0, cfg),
			events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}),
			events.NodeUpserted(t0, gpuNode("gpu-node-1")), events.Synced(t0)}
		team := quota(aqtest.Team("team-x", "root").Budget("nvidia.com/gpu", "a100", "4").Obj())
		team.Generation = 2
		evs = append(evs, events.QuotaUpserted(t0, quota(aqtest.Root().Obj())), events.QuotaUpserted(t0, team))
		return append(evs, extra...)
	}
	t1 := t0.Add(time.Second)
	led := []events.Event{
		events.LeadershipChanged(t1, "m1", events.LeadershipAcquired),
		events.OutcomeReported(t1, "team-x", events.Outcome{Kind: events.OutcomeApplied}),
		events.OutcomeReported(t1, "root", events.Outcome{Kind: events.OutcomeFailed, Message: "Cohort root: forbidden"}),
	}
	tests := map[string]struct {
		evs  []events.Event
		want []string
	}{
		"follower": {base(), []string{"no replica led here",
			"status team-x observedGeneration=2\n  Ready=True Admitted: node is a valid member of the quota tree\n  Degraded=False Admitted: no invariant violated\n  Materialized=False Pending: enforcement objects are being written\n"}},
		"leader": {base(led...), []string{"leader m1\n", "statuses as the leader m1 writes them",
			"  Materialized=True Admitted: enforcement objects match this node's budget\n  budget nvidia.com/gpu@a100 nominal=4",
			"status root observedGeneration=1\n  Ready=True Admitted: node is a valid member of the quota tree\n  Degraded=False Admitted: no invariant violated\n  Materialized=False MaterializationFailed: Cohort root: forbidden\n"}},
		"lost": {base(append(led, events.LeadershipChanged(t1, "m1", events.LeadershipLost))...), []string{"no replica led here", "Materialized=False Pending"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := writeLog(t, tc.evs)
			got := run(t, dir, "--state")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("--state lacks %q:\n%s", w, got)
				}
			}
			var rep struct {
				Items StateView `json:"items"`
			}
			if err := json.Unmarshal([]byte(run(t, dir, "--state", "-o", "json")), &rep); err != nil {
				t.Fatal(err)
			}
			if st := rep.Items.Statuses["team-x"]; st == nil || len(st.Conditions) != 3 || st.Conditions[2].Type != "Materialized" {
				t.Errorf("-o json: team-x's status %+v, want three conditions, Materialized last", st)
			}
			if name == "leader" && rep.Items.Leader != "m1" {
				t.Errorf("-o json: leader %q, want m1", rep.Items.Leader)
			}
		})
	}
}
