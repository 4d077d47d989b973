package projector

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/test/testutil/golden"
)

func node(aq *v1beta1.AcceleratorQuota, ready bool) Node {
	n := Node{Name: aq.Name, Generation: 1, Role: aq.Spec.Role, Budgets: aq.Spec.Budgets, Ready: ready}
	if aq.Spec.ParentRef != nil {
		n.Parent = aq.Spec.ParentRef.Name
	}
	return n
}

func guideInput() Input {
	in := Input{
		EnrolledNamespaces: []string{"ml-serving"},
		CoverResources:     DefaultCoverResources(),
		Capacity: []v1beta1.CapacityStatus{
			{ResourceName: "google.com/tpu", ResourceFlavor: "a100", Allocatable: resource.MustParse("0"), HighWaterMark: resource.MustParse("0"), ObservedAt: metav1.Unix(1_790_000_000, 0)},
			{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Allocatable: resource.MustParse("32"), HighWaterMark: resource.MustParse("32"), ObservedAt: metav1.Unix(1_790_000_000, 0)},
		},
	}
	applied := map[string]bool{"root": true, "ml-research": true, "team-alpha": true}
	in.Nodes = append(in.Nodes, node(aqtest.Root().Obj(), true))
	for _, aq := range aqtest.GuideTree() {
		in.Nodes = append(in.Nodes, node(aq, true))
	}
	for i := range in.Nodes {
		if applied[in.Nodes[i].Name] {
			in.Nodes[i].Outcome = events.Outcome{Kind: events.OutcomeApplied}
		}
	}
	beta := &in.Nodes[3]
	beta.Usage = map[state.Pair]events.Usage{{Resource: "nvidia.com/gpu", Flavor: "a100"}: {Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse("12"), Reserved: resource.MustParse("12"), Borrowed: resource.MustParse("4")}}
	return in
}

func TestGuideTreeProjection(t *testing.T) {
	golden.CheckJSON(t, "guide-tree.json", Project(guideInput()))
}

func TestProjectionIsDeterministic(t *testing.T) {
	in := guideInput()
	first, err := json.Marshal(Project(in))
	require.NoError(t, err)
	// Reversed node order and namespaces: the same output, byte for byte.
	for i, j := 0, len(in.Nodes)-1; i < j; i, j = i+1, j-1 {
		in.Nodes[i], in.Nodes[j] = in.Nodes[j], in.Nodes[i]
	}
	in.EnrolledNamespaces = []string{"ml-serving", "ml-serving"}
	second, err := json.Marshal(Project(in))
	require.NoError(t, err)
	require.Equal(t, string(first), string(second))
}

func TestNothingIsMaterializedWithoutEnrolledNamespaces(t *testing.T) {
	in := guideInput()
	in.EnrolledNamespaces = nil
	out := Project(in)
	require.False(t, out.Materialize)
	require.Empty(t, out.Cohorts)
	require.Empty(t, out.ClusterQueues)
	require.Empty(t, out.LocalQueues)
	for name, st := range out.Statuses {
		for _, c := range st.Conditions {
			require.NotEqual(t, v1beta1.ConditionMaterialized, c.Type, "%s reports Materialized while nothing is enrolled", name)
		}
	}
}

func TestFrozenNodesAreHeld(t *testing.T) {
	in := guideInput()
	for i := range in.Nodes {
		switch in.Nodes[i].Name {
		case "ml-research":
			in.Nodes[i].Ready, in.Nodes[i].Reason, in.Nodes[i].Message = false, "CapacityExceeded", "budget nvidia.com/gpu on a100 is 24 but the high-water mark on root is 16"
		case "team-alpha", "team-beta":
			in.Nodes[i].Ready, in.Nodes[i].Reason, in.Nodes[i].Message = false, "Frozen", "ancestor ml-research is CapacityExceeded"
		}
	}
	out := Project(in)
	require.Equal(t, map[string]bool{"ml-research": true, "team-alpha": true, "team-beta": true}, out.Held)
	require.Len(t, out.Cohorts, 1, "only root's Cohort is desired")
	require.Empty(t, out.ClusterQueues)
	require.Empty(t, out.LocalQueues)
	golden.CheckJSON(t, "frozen-statuses.json", out.Statuses)
}

func TestTeamWithSeveralBudgets(t *testing.T) {
	team := aqtest.Team("team-mixed", "root").
		Budget("nvidia.com/gpu", "a100", "8").Borrow("2").Lend("4").
		Budget("nvidia.com/gpu", "h100", "4").
		Budget("google.com/tpu", "v5e", "16").Obj()
	in := Input{
		Nodes:              []Node{node(aqtest.Root().Obj(), true), node(team, true)},
		EnrolledNamespaces: []string{"team-b", "team-a"},
		CoverResources:     map[string]resource.Quantity{"cpu": resource.MustParse("1M"), "rdma/hca_shared_devices_a": resource.MustParse("1M")},
	}
	out := Project(in)
	golden.CheckJSON(t, "several-budgets.json", out.ClusterQueues)
	require.Len(t, out.LocalQueues, 2)
	require.Equal(t, "team-a", *out.LocalQueues[0].Namespace)
	require.Equal(t, "nvidia.com/gpu@a100=8,nvidia.com/gpu@h100=4,google.com/tpu@v5e=16", out.Statuses["team-mixed"].Summary.Nominal)
	require.Equal(t, "nvidia.com/gpu@a100=0,nvidia.com/gpu@h100=0,google.com/tpu@v5e=0", out.Statuses["team-mixed"].Summary.Admitted)
}

func TestMaterializedReasons(t *testing.T) {
	cases := map[string]struct {
		ready   bool
		outcome events.Outcome
		want    metav1.Condition
	}{
		"applied":  {true, events.Outcome{Kind: events.OutcomeApplied}, metav1.Condition{Status: "True", Reason: "Admitted", Message: MsgMaterialized}},
		"pending":  {true, events.Outcome{}, metav1.Condition{Status: "False", Reason: "Pending", Message: msgPendingApply}},
		"conflict": {true, events.Outcome{Kind: events.OutcomeConflict, Message: "ClusterQueue x exists without the label"}, metav1.Condition{Status: "False", Reason: "ObjectConflict", Message: "ClusterQueue x exists without the label"}},
		"failed":   {true, events.Outcome{Kind: events.OutcomeFailed, Message: "ClusterQueue x: forbidden"}, metav1.Condition{Status: "False", Reason: "MaterializationFailed", Message: "ClusterQueue x: forbidden"}},
		"frozen":   {false, events.Outcome{Kind: events.OutcomeApplied}, metav1.Condition{Status: "False", Reason: "Frozen", Message: msgFrozenObjects}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := Node{Name: "x", Role: v1beta1.RoleClusterQueue, Ready: tc.ready, Generation: 3, Outcome: tc.outcome}
			got := materialized(&n)
			tc.want.Type, tc.want.ObservedGeneration = v1beta1.ConditionMaterialized, 3
			require.Empty(t, cmp.Diff(tc.want, got))
		})
	}
}
