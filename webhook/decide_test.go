package webhook

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

const gpu = "nvidia.com/gpu"

// Inputs are a whole tree and what else the rule book reads, for judging a
// write from scratch (Decide) in tests.
type Inputs struct {
	Tree    state.Tree
	Marks   map[state.Pair]state.Amount
	Flavors map[string]bool
	Config  events.Config
}

// Decide judges writing spec to node name, or deleting it when spec is nil,
// on a whole tree with the core's rule book (state.Admit), from scratch, as
// the webhook judges on the manager's state (state.State.Admit).
func Decide(in *Inputs, name string, spec *v1beta1.AcceleratorQuotaSpec) Verdict {
	return verdictOf(state.Admit(in.Tree, in.Marks, in.Flavors, in.Config, name, spec))
}

// StaticJudge judges every write from scratch on the tree that in returns
// (Decide): for tests and tools that hold a whole tree.
func StaticJudge(in func() *Inputs) func(context.Context, Write) (Verdict, error) {
	return func(_ context.Context, w Write) (Verdict, error) { return Decide(in(), w.Name, w.Spec), nil }
}

// guideInputs is the guide's cluster: root, the guide's tree, flavor a100
// with a high-water mark of 32 GPUs, and the default depth limit of 5.
// extra nodes are added or replace the guide's.
func guideInputs(extra ...*v1beta1.AcceleratorQuota) *Inputs {
	in := &Inputs{
		Tree:    state.Tree{v1beta1.RootName: &aqtest.Root().Obj().Spec},
		Marks:   map[state.Pair]state.Amount{{Resource: gpu, Flavor: "a100"}: 32000},
		Flavors: map[string]bool{"a100": true},
		Config:  events.DefaultConfig(),
	}
	for _, aq := range append(aqtest.GuideTree(), extra...) {
		in.Tree[aq.Name] = &aq.Spec
	}
	return in
}

// chain is Cohorts d1..dn, each under the one before, d1 under root.
func chain(n int) []*v1beta1.AcceleratorQuota {
	var out []*v1beta1.AcceleratorQuota
	parent := v1beta1.RootName
	for i := 1; i <= n; i++ {
		name := "d" + string(rune('0'+i))
		out = append(out, aqtest.Cohort(name, parent).Obj())
		parent = name
	}
	return out
}

func TestDecide(t *testing.T) {
	spec := func(aq *v1beta1.AcceleratorQuota) *v1beta1.AcceleratorQuotaSpec { return &aq.Spec }
	overrun := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "20").Obj() // 28 > 24
	tests := map[string]struct {
		in   *Inputs
		name string
		spec *v1beta1.AcceleratorQuotaSpec // nil: delete
		want Verdict
	}{
		"the guide's tree is valid": {
			in: guideInputs(), name: "team-beta",
			spec: spec(aqtest.Team("team-beta", "ml-research").Budget(gpu, "a100", "8").Borrow("4").Obj()),
			want: Verdict{Allowed: true},
		},
		"a team before its parent": {
			in: &Inputs{Tree: state.Tree{"root": &aqtest.Root().Obj().Spec}, Flavors: map[string]bool{"a100": true}, Config: events.DefaultConfig(),
				Marks: map[state.Pair]state.Amount{{Resource: gpu, Flavor: "a100"}: 32000}},
			name: "team-alpha", spec: spec(aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "16").Obj()),
			want: Verdict{Code: 403, Message: "team-alpha: parent ml-research does not exist: create it, or point spec.parentRef at an existing node"},
		},
		"raising team-alpha to 20 (the guide's message)": {
			in: guideInputs(), name: "team-alpha", spec: spec(overrun),
			want: Verdict{Code: 403, Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"},
		},
		"a node 6 levels below root": {
			in: guideInputs(chain(5)...), name: "d6", spec: spec(aqtest.Cohort("d6", "d5").Obj()),
			want: Verdict{Code: 403, Message: "d6: node is 6 levels below the root, exceeding the configured maximum of 5"},
		},
		"5 levels is fine": {
			in: guideInputs(chain(4)...), name: "d5", spec: spec(aqtest.Cohort("d5", "d4").Obj()),
			want: Verdict{Allowed: true},
		},
		"deleting a node with children": {
			in: guideInputs(), name: "ml-research",
			want: Verdict{Code: 403, Message: "ml-research still has children (team-alpha, team-beta): delete them, or point their spec.parentRef at another node, first"},
		},
		"deleting a team":                   {in: guideInputs(), name: "team-beta", want: Verdict{Allowed: true}},
		"deleting a node that is not there": {in: guideInputs(), name: "nobody", want: Verdict{Allowed: true}},
		"deleting root": {
			in: guideInputs(), name: "root",
			want: Verdict{Code: 403, Message: "root is the top of the quota tree and cannot be deleted while the quota manager runs: delete the other nodes, uninstall the quota manager, then clear root's finalizer and delete it"},
		},
		"re-parenting root": {
			in: guideInputs(), name: "root", spec: spec(aqtest.Cohort("root", "ml-research").Obj()),
			want: Verdict{Code: 403, Message: "root: root must have no parent: remove spec.parentRef"},
		},
		"root as a team": {
			in: guideInputs(), name: "root", spec: spec(aqtest.Team("root", "").Budget(gpu, "a100", "1").Obj()),
			want: Verdict{Code: 403, Message: "root: root must be a Cohort: set spec.role to Cohort; " +
				"ml-research: parent root is a ClusterQueue (a team), which cannot have children: name a Cohort as the parent"},
		},
		"root stays broken": {
			in: guideInputs(aqtest.Cohort("root", "ml-research").Obj()), name: "root",
			spec: spec(aqtest.Cohort("root", "team-beta").Obj()),
			want: Verdict{Code: 403, Message: "root: root must have no parent: remove spec.parentRef"},
		},
		"root with a budget that caps the tree": {
			in: guideInputs(), name: "root", spec: spec(aqtest.Root().Budget(gpu, "a100", "32").Obj()),
			want: Verdict{Allowed: true},
		},
		"an overrun written while the webhook was off shrinks": {
			in: guideInputs(overrun), name: "team-alpha",
			spec: spec(aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "18").Obj()),
			want: Verdict{Allowed: true},
		},
		"an existing overrun grows through a sibling": {
			in: guideInputs(overrun), name: "team-beta",
			spec: spec(aqtest.Team("team-beta", "ml-research").Budget(gpu, "a100", "9").Obj()),
			want: Verdict{Code: 403, Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 29"},
		},
		"an existing overrun grows as the parent shrinks": {
			in: guideInputs(overrun), name: "ml-research",
			spec: spec(aqtest.Cohort("ml-research", "root").Budget(gpu, "a100", "22").Obj()),
			want: Verdict{Code: 403, Message: "ml-research: budget nvidia.com/gpu on a100 is 22 but its children total 28"},
		},
		"an existing overrun shrinks as the parent grows": {
			in: guideInputs(overrun), name: "ml-research",
			spec: spec(aqtest.Cohort("ml-research", "root").Budget(gpu, "a100", "26").Obj()),
			want: Verdict{Allowed: true},
		},
		"an unrelated write beside an overrun": {
			in: guideInputs(overrun), name: "other",
			spec: spec(aqtest.Team("other", "root").Budget(gpu, "a100", "1").Obj()),
			want: Verdict{Allowed: true},
		},
		"a node already too deep goes deeper": {
			in: guideInputs(append(chain(6), aqtest.Cohort("x", "d1").Obj())...), name: "d6",
			spec: spec(aqtest.Cohort("d6", "d5").Budget(gpu, "a100", "1").Obj()),
			want: Verdict{Allowed: true},
		},
		"a subtree already too deep moves deeper": {
			in: guideInputs(append(chain(6), aqtest.Cohort("x", "d5").Obj())...), name: "d6",
			spec: spec(aqtest.Cohort("d6", "x").Obj()),
			want: Verdict{Code: 403, Message: "d6: node is 7 levels below the root, exceeding the configured maximum of 5"},
		},
		"a subtree already too deep moves up": {
			in: guideInputs(chain(6)...), name: "d6", spec: spec(aqtest.Cohort("d6", "d4").Obj()),
			want: Verdict{Allowed: true},
		},
		"a budget above capacity is admitted with a warning": {
			in: guideInputs(), name: "team-x", spec: spec(aqtest.Team("team-x", "root").Budget(gpu, "a100", "40").Obj()),
			want: Verdict{Allowed: true, Warnings: []string{
				"team-x: budget nvidia.com/gpu on a100 is 40 but the high-water mark on root is 32: lower the budget, or add capacity. Admitted anyway: the node reports CapacityExceeded, and stays frozen, until it fits",
			}},
		},
		"a flavor that does not exist": {
			in: guideInputs(), name: "team-x", spec: spec(aqtest.Team("team-x", "root").Budget(gpu, "h100", "1").Obj()),
			want: Verdict{Code: 403, Message: "team-x: budget nvidia.com/gpu names ResourceFlavor h100, which does not exist: create it or fix the budget"},
		},
		"a child under a team, with a missing flavor": {
			in: guideInputs(), name: "team-x", spec: spec(aqtest.Team("team-x", "team-beta").Budget(gpu, "h100", "1").Obj()),
			want: Verdict{Code: 403, Message: "team-x: parent team-beta is a ClusterQueue (a team), which cannot have children: name a Cohort as the parent; " +
				"team-x: budget nvidia.com/gpu names ResourceFlavor h100, which does not exist: create it or fix the budget"},
		},
		"a cycle": {
			in: guideInputs(), name: "ml-research", spec: spec(aqtest.Cohort("ml-research", "team-alpha").Budget(gpu, "a100", "24").Obj()),
			want: Verdict{Code: 403, Message: "ml-research: spec.parentRef leads back to this node (ml-research -> team-alpha -> ml-research): point one of them at a node under root; " +
				"ml-research: parent team-alpha is a ClusterQueue (a team), which cannot have children: name a Cohort as the parent; " +
				"team-alpha: spec.parentRef leads back to this node (team-alpha -> ml-research -> team-alpha): point one of them at a node under root; " +
				"team-beta: ancestor ml-research is ParentCycle, so this node cannot reach root: fix ml-research's spec.parentRef"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.in, tc.name, tc.spec)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Decide(%s) (-want +got):\n%s", tc.name, d)
			}
		})
	}
}

func TestDecideListsAtMostTen(t *testing.T) {
	var extra []*v1beta1.AcceleratorQuota
	for i := range 12 {
		extra = append(extra, aqtest.Team("t"+string(rune('a'+i)), "c").Budget(gpu, "a100", "1").Obj())
	}
	in := guideInputs(append(extra, aqtest.Cohort("c", "root").Obj())...)
	spec := &aqtest.Cohort("c", "nowhere").Obj().Spec
	if a := state.Admit(in.Tree, in.Marks, in.Flavors, in.Config, "c", spec); a.Allowed || len(a.Denied) != 13 {
		t.Fatalf("got %+v, want 13 violations denied", a)
	}
	got := Decide(in, "c", spec)
	if got.Allowed {
		t.Fatalf("got %+v, want 13 violations denied", got)
	}
	const suffix = "; and 3 more"
	if m := got.Message; len(m) < len(suffix) || m[len(m)-len(suffix):] != suffix {
		t.Errorf("message %q should end in %q", m, suffix)
	}
}
