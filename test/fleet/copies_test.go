package fleet

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager/plane"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/state"
)

// planeOn is a management plane's state: members east and west reporting
// a100 GPUs (marks east and west), and the tree; it leads.
func planeOn(t *testing.T, east, west string, quotas ...*v1beta1.AcceleratorQuota) *state.State {
	t.Helper()
	evs := aqtest.FleetEvents(t0, east, west, append([]*v1beta1.AcceleratorQuota{aqtest.Root().Obj()}, quotas...)...)
	lead := events.LeadershipChanged(t0, "plane", events.LeadershipAcquired)
	lead.Leadership.Term, lead.Leadership.Nonce = 1, "test"
	s := state.New()
	for _, ev := range append(evs, lead) {
		ev.Seq = s.LastSeq() + 1
		s.Apply(ev)
	}
	return s
}

var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

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
	w := &apply.CopyWriter{Origin: "plane-1", Quotas: versioned.NewForConfigOrDie(member.Config), Parallel: 4}
	tree := []*v1beta1.AcceleratorQuota{
		aqtest.Cohort("ml", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(),
		aqtest.Team("team-a", "ml").Budget("nvidia.com/gpu", "a100", "4").Obj(),
		aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj(),
		aqtest.Cohort("ops", "root").Obj(),
		aqtest.Team("team-c", "ops").Budget("nvidia.com/gpu", "a100", "2").Share("east", "2").Obj(),
	}
	// pass is one copier pass on east, with what the plane's watch of the
	// member holds; read tells the state what it holds then, as the
	// member's source would, with the plane's own writes of each team's
	// finalizer and hold record as the state asks for them.
	have := func() []*v1beta1.AcceleratorQuota {
		list, err := aqs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*v1beta1.AcceleratorQuota
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		return out
	}
	version := uint64(1000)
	records := func(s *state.State) {
		for _, nv := range s.Nodes() {
			if rec, ok := s.HoldRecord(nv.Name); ok || (nv.Spec.Role == v1beta1.RoleClusterQueue && !s.Guarded(nv.Name)) {
				if !ok {
					rec = s.StoredHoldRecord(nv.Name)
				}
				version++
				ev := events.QuotaUpserted(t0, &events.Quota{Name: nv.Name, UID: nv.UID, Generation: nv.Generation, Spec: *nv.Spec, Guarded: true, Holds: rec})
				ev.Version, ev.Seq = version, s.LastSeq()+1
				s.Apply(ev)
			}
		}
	}
	read := func(s *state.State, westMark string) {
		gpus := func(n string) []events.MemberCapacity {
			return []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: resource.MustParse(n), HighWaterMark: resource.MustParse(n)}}
		}
		east := events.MemberSeen(t0, "east", []string{"a100"}, gpus("6"))
		for _, aq := range have() {
			if aq.Labels[v1beta1.OriginLabel] == "plane-1" {
				east.Member.Copies = append(east.Member.Copies, plane.CopyOf(aq))
			}
		}
		slices.SortFunc(east.Member.Copies, func(a, b events.MemberCopy) int { return strings.Compare(a.Node, b.Node) })
		for _, ev := range []events.Event{east, events.MemberSeen(t0, "west", []string{"a100"}, gpus(westMark))} {
			ev.Seq = s.LastSeq() + 1
			s.Apply(ev)
		}
		records(s) // the plane's own status writes, once its state asks
	}
	// pass plays the plane until a pass writes nothing: each team's copy
	// is created with zero budgets, then raised once read back. It
	// returns what was written and swept, each name once, in order, and
	// the last pass's report.
	pass := func(s *state.State, westMark string) (written, swept []string, last apply.CopyReport) {
		t.Helper()
		for range 10 {
			read(s, westMark)
			last = w.Apply(ctx, projector.Copies(projector.FleetFromState(s), "east", "plane-1"), have())
			if len(last.Failed) > 0 {
				t.Fatalf("refused: %v", last.Failed)
			}
			for _, n := range last.Written {
				if !slices.Contains(written, n) {
					written = append(written, n)
				}
			}
			swept = append(swept, last.Swept...)
			if len(last.Written) == 0 && len(last.Swept) == 0 && len(last.Behind) == 0 {
				return written, swept, last
			}
		}
		t.Fatalf("the copies do not settle: last pass %+v", last)
		return nil, nil, last
	}

	s := planeOn(t, "6", "2", tree...)
	written, _, rep := pass(s, "2")
	if diff := cmp.Diff([]string{"ml", "team-a", "team-b"}, written); diff != "" {
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
	if written, swept, rep := pass(s, "2"); len(written) != 0 || rep.Unchanged != 3 || len(swept) != 0 {
		t.Errorf("a pass over copies in place: written %v, unchanged %d, swept %v", written, rep.Unchanged, swept)
	}

	// West's mark grows: team-a's share on east shrinks, one write (a
	// lowering goes at once).
	if written, _, _ := pass(s, "6"); !slices.Equal(written, []string{"team-a"}) {
		t.Errorf("a share moved: written %v", written)
	}
	if diff := cmp.Diff([]string{"ml<-root [] origin=plane-1", "ops<-root [] origin=", "team-a<-ml [a100=2] origin=plane-1", "team-b<-ml [a100=3] origin=plane-1"}, members(t)); diff != "" {
		t.Errorf("after the share moved (-want +got):\n%s", diff)
	}

	// team-b's split breaks (it names a member the fleet has not): held,
	// so its copy stays as it was.
	upsert := func(aq *v1beta1.AcceleratorQuota) {
		version++
		ev := events.QuotaUpserted(t0, &events.Quota{Name: aq.Name, UID: "uid-" + aq.Name, Generation: 2, Spec: aq.Spec, Guarded: true,
			Holds: s.StoredHoldRecord(aq.Name)})
		ev.Version, ev.Seq = version, s.LastSeq()+1
		s.Apply(ev)
	}
	upsert(aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "3").Share("north", "3").Obj())
	if written, swept, _ := pass(s, "6"); len(swept) != 0 || len(written) != 0 {
		t.Errorf("a held node: written %v, swept %v", written, swept)
	}
	if got := members(t); !slices.Contains(got, "team-b<-ml [a100=3] origin=plane-1") {
		t.Errorf("the held copy is gone: %v", got)
	}

	// The fleet drops ml and its teams: swept, children first; the
	// member's own ops is untouched throughout.
	for _, name := range []string{"team-a", "team-b", "ml"} {
		ev := events.Event{Time: t0, Kind: events.KindAcceleratorQuota, Op: events.OpDelete, Key: name, Seq: s.LastSeq() + 1}
		s.Apply(ev)
	}
	if _, swept, _ := pass(s, "6"); !cmp.Equal([]string{"team-a", "team-b", "ml"}, swept) {
		t.Errorf("swept (-want +got):\n%s", cmp.Diff([]string{"team-a", "team-b", "ml"}, swept))
	}
	if diff := cmp.Diff([]string{"ops<-root [] origin="}, members(t)); diff != "" {
		t.Errorf("after the sweep (-want +got):\n%s", diff)
	}
	if after, err := aqs.Get(ctx, "ops", metav1.GetOptions{}); err != nil || after.ResourceVersion != ops.ResourceVersion {
		t.Errorf("the member's own ops was written: %v, resourceVersion %s -> %s", err, ops.ResourceVersion, after.ResourceVersion)
	}
}
