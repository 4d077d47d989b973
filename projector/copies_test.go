package projector_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/planetest"
	"ome.io/quota-manager/state"
)

// render is a copy in one line: name, parent, budgets and marks.
func render(c *v1beta1.AcceleratorQuota) string {
	var budgets []string
	for _, b := range c.Spec.Budgets {
		s := fmt.Sprintf("%s@%s=%s", b.ResourceName, b.ResourceFlavor, b.Nominal.String())
		if b.LendingLimit != nil {
			s += " lend " + b.LendingLimit.String()
		}
		if b.BorrowingLimit != nil {
			s += " borrow " + b.BorrowingLimit.String()
		}
		if len(b.PerCluster) > 0 || b.Policy != "" {
			s += " SPLIT LEAKED"
		}
		budgets = append(budgets, s)
	}
	return fmt.Sprintf("%s %s <- %s [%s] origin=%s uid=%s gen=%s cluster=%s", c.Spec.Role, c.Name, c.Spec.ParentRef.Name,
		strings.Join(budgets, "; "), c.Labels[v1beta1.OriginLabel], c.Annotations[v1beta1.OriginUIDAnnotation],
		c.Annotations[v1beta1.SourceGenerationAnnotation], c.Annotations[v1beta1.ClusterAnnotation])
}

// Each member gets the teams with a share there, with the share as
// nominal, the Cohorts above them as bare topology, parents first, never
// root; a frozen team is held, and its Cohort stays.
func TestCopies(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	s := state.New()
	for _, ev := range aqtest.FleetEvents(t0, "6", "2",
		aqtest.Root().Obj(),
		aqtest.Cohort("ml", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(),
		aqtest.Team("team-a", "ml").Budget("nvidia.com/gpu", "a100", "4").Lend("2").Borrow("1").Obj(),
		aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj(),
		aqtest.Cohort("ops", "root").Obj(),
		aqtest.Cohort("ops-gpu", "ops").Obj(),
		aqtest.Team("team-c", "ops-gpu").Budget("nvidia.com/gpu", "a100", "1").Share("north", "1").Obj(),
		aqtest.Cohort("empty", "root").Obj(),
	) {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	// A copy is made with zero budgets, then raised once its members'
	// shares are recorded: play the plane's writes until they settle.
	if err := planetest.New(s, "plane-1").Settle(t0); err != nil {
		t.Fatal(err)
	}
	nodes := projector.FleetFromState(s)
	for cluster, want := range map[string][]string{
		"east": {
			"Cohort ml <- root [] origin=plane-1 uid=uid-ml gen=1 cluster=east",
			"Cohort ops <- root [] origin=plane-1 uid=uid-ops gen=1 cluster=east",
			"Cohort ops-gpu <- ops [] origin=plane-1 uid=uid-ops-gpu gen=1 cluster=east",
			"ClusterQueue team-a <- ml [nvidia.com/gpu@a100=3 lend 2 borrow 1] origin=plane-1 uid=uid-team-a gen=1 cluster=east",
			"ClusterQueue team-b <- ml [nvidia.com/gpu@a100=3] origin=plane-1 uid=uid-team-b gen=1 cluster=east",
		},
		"west": {
			"Cohort ml <- root [] origin=plane-1 uid=uid-ml gen=1 cluster=west",
			"Cohort ops <- root [] origin=plane-1 uid=uid-ops gen=1 cluster=west",
			"Cohort ops-gpu <- ops [] origin=plane-1 uid=uid-ops-gpu gen=1 cluster=west",
			// The fleet's borrowingLimit of 1 is split as the nominal, 3
			// to 1: east's.
			"ClusterQueue team-a <- ml [nvidia.com/gpu@a100=1 lend 1 borrow 0] origin=plane-1 uid=uid-team-a gen=1 cluster=west",
		},
	} {
		mc := projector.Copies(nodes, cluster, "plane-1")
		var got []string
		for _, c := range mc.Copies {
			got = append(got, render(c))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("copies on %s (-want +got):\n%s", cluster, diff)
		}
		if diff := cmp.Diff([]string{"team-c"}, mc.Held); diff != "" {
			t.Errorf("held on %s (-want +got):\n%s", cluster, diff)
		}
	}
	if st, _ := s.NodeStatus("team-c"); st.Phase != state.PhaseSplitInvalid {
		t.Fatalf("team-c: %s, want SplitInvalid: the test holds nothing", st.Phase)
	}
}
