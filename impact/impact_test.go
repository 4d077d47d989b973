package impact

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/kueuesim"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// guide is the guide's cluster (32 GPUs of a100) with its tree, and
// team-beta's ClusterQueue reporting 12 GPUs in use.
func guide(t *testing.T) *state.State {
	t.Helper()
	s := state.New()
	cfg := events.DefaultConfig()
	cfg.EnrolledNamespaces = []string{"ml-serving"}
	evs := []events.Event{events.ConfigChanged(t0, cfg), events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}})}
	for i := range 4 {
		evs = append(evs, events.NodeUpserted(t0, &events.Node{Name: fmt.Sprintf("n%d", i), Labels: map[string]string{"gpu": "a100"}, Ready: true,
			Capacity: map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")}, Allocatable: map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")}}))
	}
	evs = append(evs, events.QuotaUpserted(t0, &events.Quota{Name: v1beta1.RootName, Spec: aqtest.Root().Obj().Spec}))
	for _, aq := range aqtest.GuideTree() {
		evs = append(evs, events.QuotaUpserted(t0, &events.Quota{Name: aq.Name, Spec: aq.Spec}))
	}
	evs = append(evs, events.QueueUpserted(t0, &events.Queue{Name: "team-beta", Managed: true, Usage: []events.Usage{
		{Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse("12"), Borrowed: resource.MustParse("4")}}}),
		events.Synced(t0), events.Tick(t0))
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
		s.Apply(ev)
	}
	if nv, _ := s.Node("team-beta"); !nv.Ready() {
		t.Fatalf("team-beta is not Ready: %s", nv.Message)
	}
	return s
}

// live is what the manager wrote for s, as Kueue holds it, with every
// ClusterQueue reclaiming from any borrower.
func live(t *testing.T, s *state.State) kueuesim.Objects {
	t.Helper()
	out := projector.Project(projector.FromState(s, []string{"ml-serving"}, projector.DefaultCoverResources()))
	objs := kueuesim.Objects{Flavors: []kueue.ResourceFlavor{{ObjectMeta: metav1.ObjectMeta{Name: "a100"}, Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"}}}}}
	for _, c := range out.Cohorts {
		var co kueue.Cohort
		if err := roundTrip(c, &co); err != nil {
			t.Fatal(err)
		}
		objs.Cohorts = append(objs.Cohorts, co)
	}
	for _, c := range out.ClusterQueues {
		var cq kueue.ClusterQueue
		if err := roundTrip(c, &cq); err != nil {
			t.Fatal(err)
		}
		cq.Spec.Preemption = &kueue.ClusterQueuePreemption{ReclaimWithinCohort: kueue.PreemptionPolicyAny, WithinClusterQueue: kueue.PreemptionPolicyNever}
		objs.ClusterQueues = append(objs.ClusterQueues, cq)
	}
	return objs
}

// job is an admitted Workload of team-beta of 2 GPUs.
func job(name string, priority int32, at int) kueue.Workload {
	return kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml-serving", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0)},
		Spec: kueue.WorkloadSpec{QueueName: "team-beta", Priority: ptr.To(priority), PodSets: []kueue.PodSet{{Name: "main", Count: 1,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}}}},
		Status: kueue.WorkloadStatus{
			Admission: &kueue.Admission{ClusterQueue: "team-beta", PodSetAssignments: []kueue.PodSetAssignment{{Name: "main", Count: ptr.To[int32](1),
				Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{"nvidia.com/gpu": "a100"}, ResourceUsage: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}}},
			Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(at) * time.Second))}},
		},
	}
}

func names(ws []Workload) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return out
}

// TestGuideChange moves 4 GPUs from team-beta, which holds 12 in six
// Workloads, to team-alpha: beta is left 4 above its budget of 8, and
// alpha's claim of its 20 reclaims beta's four newest Workloads of
// priority 0, two of which it would reclaim without the change.
func TestGuideChange(t *testing.T) {
	before := guide(t)
	after := before.Clone()
	alpha := aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "20").Obj()
	beta := aqtest.Team("team-beta", "ml-research").Budget("nvidia.com/gpu", "a100", "4").Borrow("4").Obj()
	for i, aq := range []*v1beta1.AcceleratorQuota{beta, alpha} {
		if a := after.Admit(aq.Name, &aq.Spec); !a.Allowed {
			t.Fatalf("%s denied: %s", aq.Name, a.Message)
		}
		ev := events.QuotaUpserted(t0, &events.Quota{Name: aq.Name, Spec: aq.Spec})
		ev.Seq = uint64(100 + i)
		after.Apply(ev)
	}
	var wls []kueue.Workload
	for i := 1; i <= 6; i++ {
		prio := int32(0)
		if i > 4 {
			prio = 10
		}
		wls = append(wls, job(fmt.Sprintf("beta-%d", i), prio, i))
	}
	rep, err := Compute(Input{Before: before, After: after, Settings: Settings{Enrolled: []string{"ml-serving"}, Cover: projector.DefaultCoverResources()},
		Live: live(t, before), Workloads: wls, WithWorkloads: true, Now: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.AboveBudget) != 1 || rep.AboveBudget[0].Above != "4" {
		t.Fatalf("above budget: %+v", rep.AboveBudget)
	}
	if diff := cmp.Diff([]string{"beta-4", "beta-3"}, names(rep.AboveBudget[0].Workloads)); diff != "" {
		t.Errorf("above budget (-want +got):\n%s", diff)
	}
	if len(rep.Claims) != 1 || rep.Claims[0].Team != "team-alpha" || rep.Claims[0].Amount != "20" || rep.Claims[0].Admitted != "20" {
		t.Fatalf("claims: %+v", rep.Claims)
	}
	if diff := cmp.Diff([]string{"beta-4", "beta-3", "beta-2", "beta-1"}, names(rep.Claims[0].Preempts)); diff != "" {
		t.Errorf("preempted (-want +got):\n%s", diff)
	}
	var again []bool
	for _, w := range rep.Claims[0].Preempts {
		again = append(again, w.ReclaimedBefore)
	}
	if diff := cmp.Diff([]bool{true, true, false, false}, again); diff != "" {
		t.Errorf("reclaimed without the change (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"beta-5", "beta-6"}, func() []string {
		var out []string
		for _, s := range rep.NotReclaimed {
			out = append(out, s.Workload.Name)
		}
		return out
	}()); diff != "" {
		t.Errorf("not reclaimed (-want +got):\n%s", diff)
	}
	if !rep.Harmful() {
		t.Error("the change is not harmful")
	}
	// Without the change, nothing moves.
	same, err := Compute(Input{Before: before, After: before.Clone(), Settings: Settings{Enrolled: []string{"ml-serving"}, Cover: projector.DefaultCoverResources()},
		Live: live(t, before), Workloads: wls, WithWorkloads: true, Now: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if same.Harmful() || len(same.Nodes) != 0 || len(same.Claims) != 0 {
		t.Errorf("no change, yet: %+v", same)
	}
}

// On a management plane the report says, per member, the shares that
// move there and the member's admitted usage above its new share.
func TestMembersOnAPlane(t *testing.T) {
	plane := func(eastShare, westShare string) *state.State {
		s := state.New()
		evs := aqtest.FleetEvents(t0, "8", "8", aqtest.Root().Obj(),
			aqtest.Team("fleet-a", "root").Budget("nvidia.com/gpu", "a100", "9").Share("east", eastShare).Share("west", westShare).Obj(),
			aqtest.Team("fleet-b", "root").Budget("nvidia.com/gpu", "a100", "4").Obj())
		// What the members' Kueue admitted for the copies.
		seen := events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
			Allocatable: resource.MustParse("8"), HighWaterMark: resource.MustParse("8")}})
		seen.Member.Usage = []events.MemberUsage{{Node: "fleet-a", Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse("4")}}
		for i, ev := range append(evs, seen) {
			ev.Seq = uint64(i + 1)
			s.Apply(ev)
		}
		return s
	}
	before, after := plane("5", "4"), plane("7", "2")
	rep, err := Compute(Input{Before: before, After: after, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	want := []MemberReport{
		{Cluster: "east", Shares: []ShareChange{{Team: "fleet-a", Resource: "nvidia.com/gpu", Flavor: "a100", Share: Change{Old: "5", New: "7"}}}},
		{Cluster: "west", Shares: []ShareChange{{Team: "fleet-a", Resource: "nvidia.com/gpu", Flavor: "a100", Share: Change{Old: "4", New: "2"}}},
			AboveBudget: []Excess{{Team: "fleet-a", Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: "4", Nominal: "2", Budget: "2", Above: "2",
				Message: "fleet-a on west: admitted 4 of nvidia.com/gpu@a100 is above its new share of 2"}}},
	}
	if diff := cmp.Diff(want, rep.Members); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if !rep.Harmful() {
		t.Error("a change that leaves a member's admitted usage above its new share is not harmful (exit 3)")
	}
	// fleet-b's Proportional split over equal marks does not move: not
	// listed. No change at all: nothing listed.
	if rep, _ := Compute(Input{Before: before, After: plane("5", "4"), Now: t0}); len(rep.Members) != 0 || rep.Harmful() {
		t.Errorf("no change: members %+v", rep.Members)
	}
}
