package state

import (
	"fmt"
	"math"
	"testing"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// hugeTree is a Cohort of 1P GPUs with ten teams of just under 1P each:
// every amount is valid, and the children's total (10^19 milli-units)
// does not fit in an int64.
func hugeTree() Tree {
	tree := guideTree()
	tree["huge"] = spec(v1beta1.RoleCohort, under("root"), budget("nvidia.com/gpu", "a100", "1P"))
	for i := range 10 {
		tree[fmt.Sprintf("huge-%d", i)] = spec(v1beta1.RoleClusterQueue, under("huge"), budget("nvidia.com/gpu", "a100", "999999999999999"))
	}
	return tree
}

const hugeMessage = "huge: budget nvidia.com/gpu on a100 is 1P but its children total 9999999999999990"

func containmentOf(vs []Violation, node string) []string {
	var out []string
	for _, v := range vs {
		if v.Node == node && v.Reason == ReasonContainmentViolated {
			out = append(out, v.Message)
		}
	}
	return out
}

// TestHugeChildrenTotalEvaluate: Evaluate sees a children's total beyond
// 64 bits as what it is, and prints it exactly.
func TestHugeChildrenTotalEvaluate(t *testing.T) {
	vs := Evaluate(hugeTree(), map[Pair]Amount{{"nvidia.com/gpu", "a100"}: MaxAmount}, map[string]bool{"a100": true}, events.DefaultConfig())
	if got := containmentOf(vs, "huge"); len(got) != 1 || got[0] != hugeMessage {
		t.Errorf("huge's containment: %q, want [%q]", got, hugeMessage)
	}
}

// TestHugeChildrenTotalReducer: the reducer's incremental sums agree, as
// the teams come and as they go.
func TestHugeChildrenTotalReducer(t *testing.T) {
	s := guideState(t)
	tree := hugeTree()
	evs := []events.Event{quota("huge", tree["huge"])}
	for i := range 10 {
		n := fmt.Sprintf("huge-%d", i)
		evs = append(evs, quota(n, tree[n]))
	}
	applyAll(s, evs...)
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	st, _ := s.NodeStatus("huge")
	if st.Phase != PhaseContainmentViolated {
		t.Fatalf("huge is %s (%s), want ContainmentViolated", st.Phase, st.Message)
	}
	if got := s.ChildTotal("huge", Pair{"nvidia.com/gpu", "a100"}); got.String() != "9999999999999990" {
		t.Errorf("children total %s", got)
	}
	// Nine teams go: the one left fits.
	for i := range 9 {
		applyAll(s, events.Deleted(t0, events.KindAcceleratorQuota, fmt.Sprintf("huge-%d", i)))
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.NodeStatus("huge"); st.Phase == PhaseContainmentViolated {
		t.Errorf("huge still ContainmentViolated with one team: %s", st.Message)
	}
}

func TestTotal(t *testing.T) {
	var tot Total
	for range 20 {
		tot = tot.Add(MaxAmount)
	}
	if got, want := tot.String(), "20P"; got != want {
		t.Errorf("20 x MaxAmount = %s, want %s", got, want)
	}
	if tot.Cmp(TotalOf(math.MaxInt64)) <= 0 {
		t.Error("20 x MaxAmount compares at most MaxInt64")
	}
	for range 20 {
		tot = tot.Add(-MaxAmount)
	}
	if !tot.IsZero() || tot.String() != "0" {
		t.Errorf("back to %s, want 0", tot)
	}
	if neg := TotalOf(5).Add(-7000); neg.Cmp(TotalOf(0)) >= 0 || neg.String() != "-6995m" {
		t.Errorf("5m - 7 = %s", neg)
	}
}
