package projector_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/planetest"
	"ome.io/quota-manager/state"
)

// BenchmarkRootMembers is what projecting root's status.members costs on
// a plane of 20 members and 300 teams, each member holding a copy of
// every team (a Proportional split): the roster and each member's copies
// behind, computed when root's status is projected. It grows with
// members x teams. (Its setup plays the plane's writes until they settle:
// about 20 s here; at 1,000 teams, 3 minutes.)
func BenchmarkRootMembers(b *testing.B) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	const members, teams = 20, 300
	s := state.New()
	apply := func(ev events.Event) {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	c := events.DefaultConfig()
	c.Mode, c.Origin = events.ModeManagement, "fleet"
	for i := range members {
		c.Members = append(c.Members, fmt.Sprintf("m%02d", i))
	}
	apply(events.ConfigChanged(t0, c))
	apply(events.Synced(t0))
	apply(events.QuotaUpserted(t0, &events.Quota{Name: "root", Generation: 1, Spec: aqtest.Root().Obj().Spec}))
	apply(events.QuotaUpserted(t0, &events.Quota{Name: "ml", Generation: 1, Spec: aqtest.Cohort("ml", "root").Obj().Spec}))
	for i := range teams {
		name := fmt.Sprintf("team-%04d", i)
		apply(events.QuotaUpserted(t0, &events.Quota{Name: name, Generation: 1, Spec: aqtest.Team(name, "ml").Budget("nvidia.com/gpu", "a100", "20").Obj().Spec}))
	}
	for _, m := range c.Members {
		apply(events.MemberSeen(t0, m, []string{"a100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
			Allocatable: resource.MustParse("8"), HighWaterMark: resource.MustParse("8")}}))
	}
	// The leader's writes, until every member holds its copies.
	if err := planetest.New(s, "fleet").Settle(t0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		r := projector.RosterOf(s, projector.FleetFromState(s), "fleet")
		if len(r) != members {
			b.Fatalf("%d entries", len(r))
		}
	}
}
