package quotactl

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/impact"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/quotafile"
)

// bigCluster is what plan lists on a cluster of 1,000 teams (50 Cohorts
// of 20 under root, 10 GPUs each) and 10,000 admitted Workloads of one
// GPU: every team runs 10, 6 or 14 of them, the last borrowing what the
// others lend. 1,250 Nodes of 8 A100 GPUs hold them.
func bigCluster(b *testing.B, reclaim bool) (*cluster, kueueLists, events.Config, time.Time) {
	b.Helper()
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	cfg := events.DefaultConfig()
	cl := &cluster{flavors: []kueue.ResourceFlavor{{ObjectMeta: metav1.ObjectMeta{Name: "a100"}, Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"}}}}}
	for i := range 1250 {
		gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
		cl.nodes = append(cl.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i), Labels: map[string]string{"gpu": "a100"}},
			Status: corev1.NodeStatus{Capacity: gpus, Allocatable: gpus, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	cl.quotas = append(cl.quotas, *aqtest.Root().Obj())
	usage := map[string]int{}
	for g := range 50 {
		group := fmt.Sprintf("group-%02d", g)
		cl.quotas = append(cl.quotas, *aqtest.Cohort(group, v1beta1.RootName).Budget("nvidia.com/gpu", "a100", "200").Obj())
		for i := range 20 {
			name := fmt.Sprintf("team-%02d-%02d", g, i)
			cl.quotas = append(cl.quotas, *aqtest.Team(name, group).Budget("nvidia.com/gpu", "a100", "10").Borrow("10").Obj())
			usage[name] = []int{10, 6, 14, 10}[i%4]
		}
	}
	// The manager's Kueue objects for this tree, as Kueue holds them.
	r := cl.replay(cfg, now)
	out := projector.Project(projector.FromState(r.s, []string{"ml-serving"}, projector.DefaultCoverResources()))
	var kl kueueLists
	for _, c := range out.Cohorts {
		var co kueue.Cohort
		mustRoundTrip(b, c, &co)
		kl.cohorts = append(kl.cohorts, co)
	}
	for _, c := range out.ClusterQueues {
		var cq kueue.ClusterQueue
		mustRoundTrip(b, c, &cq)
		// The lenders reclaim from anyone, the borrowers never, the rest
		// from lower priorities.
		policy := map[int]kueue.PreemptionPolicy{6: kueue.PreemptionPolicyAny, 14: kueue.PreemptionPolicyNever, 10: kueue.PreemptionPolicyLowerPriority}[usage[cq.Name]]
		if !reclaim {
			policy = kueue.PreemptionPolicyNever
		}
		cq.Spec.Preemption = &kueue.ClusterQueuePreemption{ReclaimWithinCohort: policy, WithinClusterQueue: kueue.PreemptionPolicyNever}
		cq.Status.FlavorsUsage = []kueue.FlavorUsage{{Name: "a100", Resources: []kueue.ResourceUsage{
			{Name: "nvidia.com/gpu", Total: *resource.NewQuantity(int64(usage[cq.Name]), resource.DecimalSI)}}}}
		cl.queues = append(cl.queues, cq)
	}
	for _, lq := range out.LocalQueues {
		var q kueue.LocalQueue
		mustRoundTrip(b, lq, &q)
		kl.localQueues = append(kl.localQueues, q)
	}
	n := 0
	for _, cq := range cl.queues {
		for j := range usage[cq.Name] {
			n++
			name := fmt.Sprintf("%s-job-%02d", cq.Name, j)
			kl.workloads = append(kl.workloads, kueue.Workload{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ml-serving", Name: name, UID: types.UID(fmt.Sprintf("uid-%05d", n)), CreationTimestamp: metav1.NewTime(now)},
				Spec: kueue.WorkloadSpec{QueueName: kueue.LocalQueueName(cq.Name), Priority: ptr.To(int32(j % 3 * 10)), PodSets: []kueue.PodSet{{Name: "main", Count: 1,
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}}}},
				Status: kueue.WorkloadStatus{
					Admission: &kueue.Admission{ClusterQueue: kueue.ClusterQueueReference(cq.Name), PodSetAssignments: []kueue.PodSetAssignment{{Name: "main", Count: ptr.To[int32](1),
						Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{"nvidia.com/gpu": "a100"}, ResourceUsage: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
					Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.NewTime(now.Add(time.Duration(n) * time.Second))}},
				},
			})
		}
	}
	if n != 10000 {
		b.Fatalf("%d Workloads, want 10,000", n)
	}
	return cl, kl, cfg, now
}

func mustRoundTrip(b *testing.B, in, out any) {
	data, err := json.Marshal(in)
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPlan is plan's own work once the lists are in: replaying the
// tree twice, judging the write, and the impact (two simulations of
// Kueue, with some 250 lenders' claims each). team-00-01, which runs 6 of
// its 10, is lowered to 2: the cluster's quota is then 8 short of what
// runs. With reclaim, the lenders reclaim from any borrower, and their
// claims preempt about 1,000 Workloads; without, every ClusterQueue keeps
// Kueue's default, and nothing is preempted.
func BenchmarkPlan(b *testing.B) {
	b.Run("reclaim", func(b *testing.B) { benchmarkPlan(b, true) })
	b.Run("no-reclaim", func(b *testing.B) { benchmarkPlan(b, false) })
}

func benchmarkPlan(b *testing.B, reclaim bool) {
	cl, kl, cfg, now := bigCluster(b, reclaim)
	spec := aqtest.Team("team-00-01", "group-00").Budget("nvidia.com/gpu", "a100", "2").Obj().Spec
	writes := []quotafile.Write{{Source: "bench", Name: "team-00-01", Spec: &spec}}
	b.ReportAllocs()
	b.ResetTimer()
	var claims, preempted int
	cpu0 := cpuTime(b)
	for b.Loop() {
		_, rep, err := planOf(cl, kl, cfg, now, writes, nil, impactClaims())
		if err != nil {
			b.Fatal(err)
		}
		claims, preempted = len(rep.Impact.Claims), 0
		for _, c := range rep.Impact.Claims {
			preempted += len(c.Preempts)
		}
		if len(rep.Impact.AboveBudget) != 1 {
			b.Fatalf("above budget: %+v", rep.Impact.AboveBudget)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		// The peak resident memory of the whole process: the lists
		// plan holds, and its own work on them.
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
	}
	b.ReportMetric(float64(claims), "claims")
	b.ReportMetric(float64(preempted), "preempted")
}

// cpuTime is the CPU this process has used, user and system: what a
// loaded host does not inflate as it does wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeWorkloads is the decoding of the list of 10,000
// Workloads, the largest of plan's lists, as JSON (Kueue's types have no
// protobuf).
func BenchmarkDecodeWorkloads(b *testing.B) {
	_, kl, _, _ := bigCluster(b, true)
	data, err := json.Marshal(kueue.WorkloadList{Items: kl.workloads})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		var list kueue.WorkloadList
		if err := json.Unmarshal(data, &list); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func impactClaims() impact.ClaimOptions { return impact.ClaimOptions{} }
