package state

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

type specOpt func(*v1beta1.AcceleratorQuotaSpec)

func spec(role v1beta1.Role, opts ...specOpt) *v1beta1.AcceleratorQuotaSpec {
	s := &v1beta1.AcceleratorQuotaSpec{Role: role}
	for _, o := range opts {
		o(s)
	}
	return s
}

func under(parent string) specOpt {
	return func(s *v1beta1.AcceleratorQuotaSpec) { s.ParentRef = &v1beta1.ParentReference{Name: parent} }
}

func budget(res, flavor, nominal string) specOpt {
	return func(s *v1beta1.AcceleratorQuotaSpec) {
		s.Budgets = append(s.Budgets, v1beta1.Budget{ResourceName: res, ResourceFlavor: flavor, Nominal: resource.MustParse(nominal)})
	}
}

func guideTree() Tree {
	return Tree{
		"root":        spec(v1beta1.RoleCohort),
		"ml-research": spec(v1beta1.RoleCohort, under("root"), budget("nvidia.com/gpu", "a100", "24")),
		"team-alpha":  spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", "16")),
		"team-beta":   spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", "8")),
	}
}

func TestEvaluate(t *testing.T) {
	gpu := Pair{"nvidia.com/gpu", "a100"}
	marks := map[Pair]Amount{gpu: 32000}
	flavors := map[string]bool{"a100": true}
	tests := map[string]struct {
		change func(Tree)
		cfg    func(*events.Config)
		want   []Violation
	}{
		"the guide's tree is valid": {},
		"team-alpha raised to 20": {
			change: func(t Tree) {
				t["team-alpha"] = spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "a100", "20"))
			},
			want: []Violation{{"ml-research", ReasonContainmentViolated, "nvidia.com/gpu@a100",
				"ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"}},
		},
		"six levels deep": {
			change: func(t Tree) {
				for _, n := range [][2]string{{"l1", "root"}, {"l2", "l1"}, {"l3", "l2"}, {"l4", "l3"}, {"l5", "l4"}, {"l6", "l5"}} {
					t[n[0]] = spec(v1beta1.RoleCohort, under(n[1]))
				}
			},
			want: []Violation{{"l6", ReasonDepthExceeded, "", "node is 6 levels below the root, exceeding the configured maximum of 5"}},
		},
		"depth check off": {
			change: func(t Tree) {
				t["team-beta"] = spec(v1beta1.RoleClusterQueue, under("team-alpha"), budget("nvidia.com/gpu", "a100", "8"))
			},
			cfg: func(c *events.Config) { c.MaxTreeDepth = 0 },
			want: []Violation{{"team-beta", ReasonNodeKindInvalid, "parent",
				"parent team-alpha is a ClusterQueue (a team), which cannot have children: name a Cohort as the parent"}},
		},
		"over the mark, on a missing flavor": {
			change: func(t Tree) {
				t["big"] = spec(v1beta1.RoleClusterQueue, under("root"), budget("nvidia.com/gpu", "a100", "33"), budget("nvidia.com/gpu", "h100", "1"))
			},
			want: []Violation{
				{"big", ReasonFlavorMissing, "nvidia.com/gpu@h100", "budget nvidia.com/gpu names ResourceFlavor h100, which does not exist: create it or fix the budget"},
				{"big", ReasonCapacityExceeded, "nvidia.com/gpu@a100", "budget nvidia.com/gpu on a100 is 33 but the high-water mark on root is 32: lower the budget, or add capacity"},
			},
		},
		"a pair without a mark counts as 0": {
			change: func(t Tree) {
				t["tpu"] = spec(v1beta1.RoleClusterQueue, under("root"), budget("google.com/tpu", "a100", "500m"))
			},
			want: []Violation{{"tpu", ReasonCapacityExceeded, "google.com/tpu@a100",
				"budget google.com/tpu on a100 is 500m but the high-water mark on root is 0: lower the budget, or add capacity"}},
		},
		"missing parent, unreachable child": {
			change: func(t Tree) {
				t["ml-research"].ParentRef.Name = "nowhere"
			},
			want: []Violation{
				{"ml-research", ReasonParentMissing, "parentRef", "parent nowhere does not exist: create it, or point spec.parentRef at an existing node"},
				{"team-alpha", ReasonUnreachable, "", "ancestor ml-research is ParentMissing, so this node cannot reach root: fix ml-research's spec.parentRef"},
				{"team-beta", ReasonUnreachable, "", "ancestor ml-research is ParentMissing, so this node cannot reach root: fix ml-research's spec.parentRef"},
			},
		},
		"cycle with a tail": {
			change: func(t Tree) {
				t["x"] = spec(v1beta1.RoleCohort, under("y"))
				t["y"] = spec(v1beta1.RoleCohort, under("x"))
				t["z"] = spec(v1beta1.RoleClusterQueue, under("y"), budget("nvidia.com/gpu", "a100", "1"))
			},
			want: []Violation{
				{"x", ReasonParentCycle, "parentRef", "spec.parentRef leads back to this node (x -> y -> x): point one of them at a node under root"},
				{"y", ReasonParentCycle, "parentRef", "spec.parentRef leads back to this node (y -> x -> y): point one of them at a node under root"},
				{"z", ReasonUnreachable, "", "ancestor y is ParentCycle, so this node cannot reach root: fix y's spec.parentRef"},
			},
		},
		"no root": {
			change: func(t Tree) { delete(t, "root") },
			want: []Violation{
				{"ml-research", ReasonParentMissing, "parentRef", "parent root does not exist: create it, or point spec.parentRef at an existing node"},
				{"team-alpha", ReasonUnreachable, "", "ancestor ml-research is ParentMissing, so this node cannot reach root: fix ml-research's spec.parentRef"},
				{"team-beta", ReasonUnreachable, "", "ancestor ml-research is ParentMissing, so this node cannot reach root: fix ml-research's spec.parentRef"},
			},
		},
		"a node named like nothing has no parent": {
			change: func(t Tree) { t[""] = spec(v1beta1.RoleCohort, under("root")) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree := guideTree()
			if tc.change != nil {
				tc.change(tree)
			}
			cfg := events.DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			if diff := cmp.Diff(tc.want, Evaluate(tree, marks, flavors, cfg)); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	before := []Violation{{"ml-research", ReasonContainmentViolated, "nvidia.com/gpu@a100", "... total 28"}}
	after := []Violation{
		{"ml-research", ReasonContainmentViolated, "nvidia.com/gpu@a100", "... total 26"},
		{"team-gamma", ReasonCapacityExceeded, "nvidia.com/gpu@a100", "..."},
	}
	if diff := cmp.Diff(after[1:], Diff(before, after)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := Diff(after, before); got != nil {
		t.Errorf("a write that removes violations adds %v", got)
	}
}

func TestNextMark(t *testing.T) {
	tests := map[string]struct {
		mark, installed Amount
		percent         int
		want            Amount
	}{
		"growth is believed at once":       {32, 40, 10, 40},
		"one of four nodes deleted":        {32, 24, 10, 24},
		"two of 32 retired, in the band":   {32, 30, 10, 32},
		"exactly the band stays":           {40, 36, 10, 40},
		"past the band falls to installed": {40, 35, 10, 35},
		"zero percent follows installed":   {32, 31, 0, 31},
		"a full band never lowers":         {32, 0, 100, 32},
		"huge amounts do not overflow":     {MaxAmount * 8, MaxAmount * 7, 10, MaxAmount * 7},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := nextMark(tc.mark, tc.installed, tc.percent); got != tc.want {
				t.Errorf("nextMark(%d, %d, %d%%) = %d, want %d", tc.mark, tc.installed, tc.percent, got, tc.want)
			}
		})
	}
}

func TestAmountOf(t *testing.T) {
	tests := map[string]struct {
		q    string
		want Amount
	}{
		"whole":     {"8", 8000},
		"milli":     {"500m", 500},
		"suffix":    {"2k", 2_000_000},
		"negative":  {"-3", 0},
		"clamped":   {"1E+30", MaxAmount},
		"rounds up": {"1n", 1},
		// GPU memory of a large cluster, in bytes, is not clamped.
		"bytes": {"800Ti", 800 * 1024 * 1024 * 1024 * 1024 * 1000},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := AmountOf(resource.MustParse(tc.q)); got != tc.want {
				t.Errorf("AmountOf(%s) = %d, want %d", tc.q, got, tc.want)
			}
		})
	}
	if got := AmountOf(resource.MustParse("1280Gi")).String(); got != "1280Gi" {
		t.Errorf("1280Gi formats as %q: a whole number of Mi is shown in binary units", got)
	}
	if got := Amount(24000).String(); got != "24" {
		t.Errorf("24000 milli formats as %q", got)
	}
}
