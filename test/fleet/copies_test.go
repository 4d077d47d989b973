package fleet

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/state"
)

// plane is a management plane's state: members east and west reporting
// a100 GPUs (marks east and west), and the tree.
func plane(t *testing.T, east, west string, quotas ...*v1beta1.AcceleratorQuota) *state.State {
	t.Helper()
	evs := aqtest.FleetEvents(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), east, west, append([]*v1beta1.AcceleratorQuota{aqtest.Root().Obj()}, quotas...)...)
	s := state.New()
	for _, ev := range evs {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	return s
}

// members renders the member's AcceleratorQuotas other than root: name,
// parent, budgets and origin.
func members(t *testing.T) []string {
	t.Helper()
	return quotaLines(t, aqs, "")
}

// The writer puts each member's copies in place, parents first, writes
// nothing when they are in place, follows a share, never touches a node
// of the member's own (nor what would go below it), holds a frozen node's
// copy, and sweeps, children first, the copies no longer wanted.
func TestCopyWriter(t *testing.T) {
	ctx := context.Background()
	if _, err := aqs.Create(ctx, aqtest.Root().Obj(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// A node the member's admin made, under a name the fleet uses too.
	if _, err := aqs.Create(ctx, aqtest.Cohort("ops", "root").Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"team-a", "team-b", "team-c", "ml", "ops"} {
			_ = aqs.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	w := &apply.CopyWriter{Origin: "plane-1", Quotas: versioned.NewForConfigOrDie(member.Config)}
	tree := []*v1beta1.AcceleratorQuota{
		aqtest.Cohort("ml", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(),
		aqtest.Team("team-a", "ml").Budget("nvidia.com/gpu", "a100", "4").Obj(),
		aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj(),
		aqtest.Cohort("ops", "root").Obj(),
		aqtest.Team("team-c", "ops").Budget("nvidia.com/gpu", "a100", "2").Share("east", "2").Obj(),
	}
	pass := func(s *state.State) apply.CopyReport {
		t.Helper()
		// What the plane's watch of the member would hold.
		list, err := aqs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var have []*v1beta1.AcceleratorQuota
		for i := range list.Items {
			have = append(have, &list.Items[i])
		}
		rep := w.Apply(ctx, projector.Copies(projector.FleetFromState(s), "east", "plane-1"), have)
		if len(rep.Failed) > 0 {
			t.Fatalf("refused: %v", rep.Failed)
		}
		return rep
	}

	rep := pass(plane(t, "6", "2", tree...))
	if diff := cmp.Diff([]string{"ml", "team-a", "team-b"}, rep.Written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	if !strings.Contains(rep.Conflicts["ops"], "a node of its own named ops") || !strings.Contains(rep.Conflicts["team-c"], "its parent ops on the member is not this plane's copy") {
		t.Errorf("conflicts: %v", rep.Conflicts)
	}
	want := []string{"ml<-root [] origin=plane-1", "ops<-root [] origin=", "team-a<-ml [a100=3] origin=plane-1", "team-b<-ml [a100=3] origin=plane-1"}
	if diff := cmp.Diff(want, members(t)); diff != "" {
		t.Errorf("the member holds (-want +got):\n%s", diff)
	}
	ops, err := aqs.Get(ctx, "ops", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// In place: a pass that finds all three writes nothing.
	if rep := pass(plane(t, "6", "2", tree...)); len(rep.Written) != 0 || rep.Unchanged != 3 || len(rep.Swept) != 0 {
		t.Errorf("a pass over copies in place: written %v, unchanged %d, swept %v", rep.Written, rep.Unchanged, rep.Swept)
	}

	// West's mark grows: team-a's share on east shrinks, one write.
	if rep := pass(plane(t, "6", "6", tree...)); !slices.Equal(rep.Written, []string{"team-a"}) {
		t.Errorf("a share moved: written %v", rep.Written)
	}
	if diff := cmp.Diff([]string{"ml<-root [] origin=plane-1", "ops<-root [] origin=", "team-a<-ml [a100=2] origin=plane-1", "team-b<-ml [a100=3] origin=plane-1"}, members(t)); diff != "" {
		t.Errorf("after the share moved (-want +got):\n%s", diff)
	}

	// team-b's split breaks (it names a member the fleet has not): held,
	// so its copy stays as it was.
	broken := slices.Clone(tree)
	broken[2] = aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "3").Share("north", "3").Obj()
	if rep := pass(plane(t, "6", "6", broken...)); len(rep.Swept) != 0 || len(rep.Written) != 0 {
		t.Errorf("a held node: written %v, swept %v", rep.Written, rep.Swept)
	}
	if got := members(t); !slices.Contains(got, "team-b<-ml [a100=3] origin=plane-1") {
		t.Errorf("the held copy is gone: %v", got)
	}

	// The fleet drops ml and its teams: swept, children first; the
	// member's own ops is untouched throughout.
	rep = pass(plane(t, "6", "6", tree[3:]...))
	if diff := cmp.Diff([]string{"team-a", "team-b", "ml"}, rep.Swept); diff != "" {
		t.Errorf("swept (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ops<-root [] origin="}, members(t)); diff != "" {
		t.Errorf("after the sweep (-want +got):\n%s", diff)
	}
	if after, err := aqs.Get(ctx, "ops", metav1.GetOptions{}); err != nil || after.ResourceVersion != ops.ResourceVersion {
		t.Errorf("the member's own ops was written: %v, resourceVersion %s -> %s", err, ops.ResourceVersion, after.ResourceVersion)
	}
}
