package replay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
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
			events.NodeUpserted(t0, eightGPUNode("gpu-node-1")), events.Synced(t0)}
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
			"status team-x observedGeneration=2\n  Ready=True Admitted: node is a valid member of the quota tree (since 2026-11-30T03:00:00Z)\n" +
				"  Degraded=False Admitted: no invariant violated (since 2026-11-30T03:00:00Z)\n" +
				"  Materialized=False Pending: enforcement objects are being written (since 2026-11-30T03:00:00Z)\n"}},
		// Materialized took its status with the outcome event, a second
		// after the node's creation.
		"leader": {base(led...), []string{"leader m1\n", "statuses as the leader m1 writes them",
			"  Materialized=True Admitted: enforcement objects match this node's budget (since 2026-11-30T03:00:01Z)\n  budget nvidia.com/gpu@a100 nominal=4",
			"status root observedGeneration=1\n  Ready=True Admitted: node is a valid member of the quota tree (since 2026-11-30T03:00:00Z)\n" +
				"  Degraded=False Admitted: no invariant violated (since 2026-11-30T03:00:00Z)\n" +
				"  Materialized=False MaterializationFailed: Cohort root: forbidden (since 2026-11-30T03:00:00Z)\n"}},
		// A stored status that shows a condition's status keeps its stamp:
		// team-x has been Materialized since before this log began; the
		// stored Ready=False does not stand, so Ready keeps the state's.
		"stored": {base(append(led, events.QuotaUpserted(t1, storedAs(aqtest.Team("team-x", "root").Budget("nvidia.com/gpu", "a100", "4").Obj(),
			events.Stamp{Type: "Materialized", Status: "True", Since: t0.Add(-time.Hour)}, events.Stamp{Type: "Ready", Status: "False", Since: t0.Add(-time.Hour)})))...),
			[]string{"  Materialized=True Admitted: enforcement objects match this node's budget (since 2026-11-30T02:00:00Z)\n",
				"  Ready=True Admitted: node is a valid member of the quota tree (since 2026-11-30T03:00:00Z)\n"}},
		"lost": {base(append(led, events.LeadershipChanged(t1, "m1", events.LeadershipLost))...), []string{"no replica led here", "Materialized=False Pending: enforcement objects are being written (since 2026-11-30T03:00:01Z)"}},
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

// storedAs is the compact form of aq, at generation 2, with the stored
// conditions stamps.
func storedAs(aq *v1beta1.AcceleratorQuota, stamps ...events.Stamp) *events.Quota {
	q := quota(aq)
	q.Generation, q.Conditions = 2, stamps
	return q
}
