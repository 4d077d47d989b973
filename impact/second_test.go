package impact

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/kueuesim"
)

// A Workload that one claim preempts, that the simulation admits again
// once a later claim frees more than it needs, and that a third claim
// would preempt again: the claims stop there, saying why, and the
// Workloads named before stay as they were.
func TestClaimsStopAtASecondPreemption(t *testing.T) {
	queue := func(name, nominal string) kueue.ClusterQueue {
		return kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ClusterQueueSpec{
			CohortName: "pool", NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{"nvidia.com/gpu"}, Flavors: []kueue.FlavorQuotas{{
				Name: "a100", Resources: []kueue.ResourceQuota{{Name: "nvidia.com/gpu", NominalQuota: resource.MustParse(nominal)}}}}}},
			Preemption: &kueue.ClusterQueuePreemption{ReclaimWithinCohort: kueue.PreemptionPolicyAny, WithinClusterQueue: kueue.PreemptionPolicyNever},
		}}
	}
	objs := kueuesim.Objects{
		Flavors:       []kueue.ResourceFlavor{{ObjectMeta: metav1.ObjectMeta{Name: "a100"}}},
		Cohorts:       []kueue.Cohort{{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}},
		ClusterQueues: []kueue.ClusterQueue{queue("lend-1", "1"), queue("lend-2", "2"), queue("lend-3", "2"), queue("team-b", "0")},
	}
	// team-b borrows all 5: y (4 GPUs), then x (1), admitted last.
	admitted := func(name, gpus string, at int) kueue.Workload {
		w := job(name, 0, at)
		w.Spec.QueueName = "team-b"
		w.Status.Admission.ClusterQueue = "team-b"
		w.Status.Admission.PodSetAssignments[0].ResourceUsage["nvidia.com/gpu"] = resource.MustParse(gpus)
		w.Spec.PodSets[0].Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}
		return w
	}
	wls := []kueue.Workload{admitted("y", "4", 1), admitted("x", "1", 2)}
	sim := kueuesim.New(objs, workloadsOf(wls, nil), t0)
	res, err := run(sim, objs, []kueuesim.FR{{Resource: "nvidia.com/gpu", Flavor: "a100"}}, ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type claim struct {
		Team, Admitted string
		Preempts       []string
		StoppedAt      int
	}
	var got []claim
	for _, c := range res.claims {
		got = append(got, claim{c.Team, c.Admitted, names(c.Preempts), c.StoppedAt})
	}
	want := []claim{
		{Team: "lend-1", Admitted: "1", Preempts: []string{"x"}},
		{Team: "lend-2", Admitted: "2", Preempts: []string{"y"}},
		{Team: "lend-3", Admitted: "0", StoppedAt: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("claims (-want +got):\n%s", diff)
	}
	if !res.stopped || res.claims[2].Unsure == "" {
		t.Errorf("the run does not say it stopped: %+v", res.claims[2])
	}
	t.Log(res.claims[2].Unsure)
}
