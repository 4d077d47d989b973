package kueuesim

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

var (
	t0  = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	gpu = FR{Flavor: "a100", Resource: "nvidia.com/gpu"}
)

// team is a ClusterQueue as the quota manager writes one: one flavor, an
// explicit borrowing limit, every namespace.
func team(name, cohort string, nominal int64, borrowing *int64, reclaim kueue.PreemptionPolicy) kueue.ClusterQueue {
	rq := kueue.ResourceQuota{Name: "nvidia.com/gpu", NominalQuota: *resource.NewQuantity(nominal, resource.DecimalSI)}
	if borrowing != nil {
		rq.BorrowingLimit = resource.NewQuantity(*borrowing, resource.DecimalSI)
	}
	return kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ClusterQueueSpec{
		CohortName:        kueue.CohortReference(cohort),
		NamespaceSelector: &metav1.LabelSelector{},
		ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{"nvidia.com/gpu"},
			Flavors: []kueue.FlavorQuotas{{Name: "a100", Resources: []kueue.ResourceQuota{rq}}}}},
		Preemption: &kueue.ClusterQueuePreemption{ReclaimWithinCohort: reclaim, WithinClusterQueue: kueue.PreemptionPolicyNever},
	}}
}

// running is an admitted Workload of gpus, reserved at t0+at seconds.
func running(queue, name string, gpus int64, priority int64, at int) *Workload {
	return &Workload{Namespace: "ns", Name: name, UID: "uid-" + name, Queue: queue, Priority: priority, Admitted: true,
		QueuedAt: t0, ReservedAt: t0.Add(time.Duration(at) * time.Second), Usage: map[FR]int64{gpu: gpus}}
}

func names(ws []*Workload) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return out
}

func objects(queues ...kueue.ClusterQueue) Objects {
	return Objects{
		Flavors:       []kueue.ResourceFlavor{{ObjectMeta: metav1.ObjectMeta{Name: "a100"}}},
		Cohorts:       []kueue.Cohort{{ObjectMeta: metav1.ObjectMeta{Name: "ml-research"}, Spec: kueue.CohortSpec{ParentName: "root"}}, {ObjectMeta: metav1.ObjectMeta{Name: "root"}}},
		ClusterQueues: queues,
	}
}

// TestExcessGivesBack: the Workloads above a limit are taken in Kueue's
// order, lowest priority and newest first, and one the rest fits without
// is given back, as Kueue's fill-back does.
func TestExcessGivesBack(t *testing.T) {
	ws := []*Workload{
		running("beta", "small-new", 2, 0, 30),
		running("beta", "big-old", 8, 0, 10),
		running("beta", "small-high", 2, 1, 40),
	}
	s := New(objects(team("beta", "ml-research", 8, ptr.To[int64](0), kueue.PreemptionPolicyNever)), ws, t0.Add(time.Hour))
	// 12 used, limit 8: small-new (2) is not enough, big-old (8) is, and
	// small-new fits back.
	if diff := cmp.Diff([]string{"big-old"}, names(s.Excess("beta", gpu, 8))); diff != "" {
		t.Error(diff)
	}
	// Limit 3: small-new and big-old leave 2.
	if diff := cmp.Diff([]string{"small-new", "big-old"}, names(s.Excess("beta", gpu, 3))); diff != "" {
		t.Error(diff)
	}
	if got := s.Excess("beta", gpu, 12); got != nil {
		t.Errorf("nothing is above a limit of 12, got %v", names(got))
	}
}

// guideLowered is the guide's tree with team-beta lowered to 4 (borrowing
// 4) and holding 12 Workloads of one GPU, admitted a second apart;
// team-alpha (16) reclaims as policy says.
func guideLowered(policy kueue.PreemptionPolicy) *Sim {
	var ws []*Workload
	for i := range 12 {
		ws = append(ws, running("team-beta", fmt.Sprintf("beta-%02d", i), 1, 0, i))
	}
	return New(objects(
		team("team-alpha", "ml-research", 16, ptr.To[int64](0), policy),
		team("team-beta", "ml-research", 4, ptr.To[int64](4), kueue.PreemptionPolicyNever),
	), ws, t0.Add(time.Hour))
}

// TestClaimReclaimsNewestFirst is the guide's tree after team-beta is
// lowered to 4 (borrowing 4) with 12 GPUs admitted: team-alpha claiming
// its 16 takes back 8, from beta's most recently admitted Workloads.
func TestClaimReclaimsNewestFirst(t *testing.T) {
	s := guideLowered(kueue.PreemptionPolicyAny)
	claim := s.Claim("team-alpha", "alpha-claim", gpu, 16, 0)
	if err := s.Submit(claim); err != nil {
		t.Fatal(err)
	}
	events, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	var preempted []string
	admitted := false
	for _, e := range events {
		switch e.Kind {
		case Preempted:
			preempted = append(preempted, e.W.Name)
			if e.By != claim || e.Reason != kueue.InCohortReclamationReason {
				t.Errorf("%s preempted by %v for %s", e.W.Name, e.By.Name, e.Reason)
			}
		case Admitted:
			admitted = admitted || e.W == claim
		}
	}
	want := []string{"beta-11", "beta-10", "beta-09", "beta-08", "beta-07", "beta-06", "beta-05", "beta-04"}
	if diff := cmp.Diff(want, preempted); diff != "" {
		t.Errorf("preempted (-want +got):\n%s", diff)
	}
	if !admitted {
		t.Error("the claim was not admitted once its targets were gone")
	}
	if got := s.Queue("team-beta").Usage(gpu); got != 4 {
		t.Errorf("team-beta uses %d after the claim, want 4", got)
	}
}

// TestClaimNeverPolicy: a lender whose ClusterQueue never reclaims
// preempts nothing, and its claim waits.
func TestClaimNeverPolicy(t *testing.T) {
	s := guideLowered(kueue.PreemptionPolicyNever)
	claim := s.Claim("team-alpha", "alpha-claim", gpu, 16, 0)
	if err := s.Submit(claim); err != nil {
		t.Fatal(err)
	}
	events, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 0 {
		t.Errorf("want nothing to happen, got %d events, the first %s %s", len(events), events[0].Kind, events[0].W.Name)
	}
	if claim.Admitted {
		t.Error("the claim was admitted")
	}
}

// TestRaiseAdmitsPending: pending Workloads that a raised nominal makes
// room for are admitted in queue order (priority, then age), and those
// still too big wait.
func TestRaiseAdmitsPending(t *testing.T) {
	pending := func(name string, gpus, priority int64, at int) *Workload {
		return &Workload{Namespace: "ns", Name: name, UID: "uid-" + name, Queue: "team-beta", Priority: priority, QueuedAt: t0.Add(time.Duration(at) * time.Second),
			PodSets: []PodSet{{Name: "main", Count: 1, Requests: map[string]int64{"nvidia.com/gpu": gpus}}}}
	}
	ws := []*Workload{running("team-beta", "r1", 8, 0, 0), pending("p-old", 4, 0, 1), pending("p-high", 4, 5, 2), pending("p-big", 8, 0, 3)}
	s := New(objects(team("team-beta", "ml-research", 16, ptr.To[int64](0), kueue.PreemptionPolicyNever)), ws, t0.Add(time.Hour))
	events, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, string(e.Kind)+" "+e.W.Name)
	}
	if diff := cmp.Diff([]string{"Admitted p-high", "Admitted p-old"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestPreemptedWorkloadReturns: a preempted Workload is requeued with its
// requests and comes back when room frees up, as Kueue does; the next
// claim then preempts it again. team-alpha (8) claims its quota one GPU
// at a time from team-beta, which borrows all of it.
func TestPreemptedWorkloadReturns(t *testing.T) {
	mk := func(name string, gpus, priority int64, at int) *Workload {
		w := running("team-beta", name, gpus, priority, at)
		w.PodSets = []PodSet{{Name: "main", Count: 1, Requests: map[string]int64{"nvidia.com/gpu": gpus}}}
		return w
	}
	s := New(objects(
		team("team-alpha", "ml-research", 8, ptr.To[int64](0), kueue.PreemptionPolicyAny),
		team("team-beta", "ml-research", 0, nil, kueue.PreemptionPolicyNever),
	), []*Workload{mk("small-new", 3, 0, 2), mk("big-high", 4, 10, 1)}, t0.Add(time.Hour))
	var got []string
	for i := 1; i <= 8; i++ {
		claim := s.Claim("team-alpha", fmt.Sprintf("claim-%d", i), gpu, 1, 0)
		if err := s.Submit(claim); err != nil {
			t.Fatal(err)
		}
		events, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.W != claim {
				got = append(got, fmt.Sprintf("%d: %s %s", i, e.Kind, e.W.Name))
			}
		}
		if !claim.Admitted {
			t.Fatalf("claim %d waits", i)
		}
	}
	want := []string{"2: Preempted small-new", "5: Preempted big-high", "5: Admitted small-new", "6: Preempted small-new"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestAdmittedKeepsItsRequests: an admitted Workload read from the API
// keeps its pod sets' requests, which it asks for again once evicted.
func TestAdmittedKeepsItsRequests(t *testing.T) {
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	obj := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"},
		Spec: kueue.WorkloadSpec{QueueName: "lq", PodSets: []kueue.PodSet{{Name: "main", Count: 3, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: gpus, Limits: gpus}}}}}}}},
		Status: kueue.WorkloadStatus{
			Admission: &kueue.Admission{ClusterQueue: "team", PodSetAssignments: []kueue.PodSetAssignment{{Name: "main", Count: ptr.To[int32](3),
				Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{"nvidia.com/gpu": "a100"}, ResourceUsage: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("6")}}}},
			Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.NewTime(t0)}},
		},
	}
	w, st := FromAPI(obj)
	if st != Holding || w.Usage[gpu] != 6 {
		t.Fatalf("state %v, usage %v", st, w.Usage)
	}
	if diff := cmp.Diff(map[string]int64{"nvidia.com/gpu": 6}, w.Requests()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
