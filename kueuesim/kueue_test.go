package kueuesim_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/resources"
	"sigs.k8s.io/kueue/pkg/scheduler/flavorassigner"
	"sigs.k8s.io/kueue/pkg/scheduler/preemption"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
	"sigs.k8s.io/kueue/pkg/workload"

	"ome.io/quota-manager/kueuesim"
)

// scenario is a random Kueue configuration: a tree of Cohorts, the
// ClusterQueues in it with their quotas and policies, admitted Workloads,
// and one incoming Workload.
type scenario struct {
	flavors   []kueue.ResourceFlavor
	cohorts   []kueue.Cohort
	queues    []kueue.ClusterQueue
	admitted  []kueue.Workload
	incoming  *kueue.Workload
	targetCQ  string
	resources []string
}

var base = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func q(v int) resource.Quantity { return *resource.NewQuantity(int64(v), resource.DecimalSI) }

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func randomScenario(seed uint64) *scenario {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := &scenario{resources: []string{"example.com/gpu"}}
	if r.IntN(3) == 0 {
		sc.resources = append(sc.resources, "cpu")
	}
	nf := 1 + r.IntN(2)
	var flavors []string
	for i := range nf {
		name := fmt.Sprintf("f%d", i)
		flavors = append(flavors, name)
		sc.flavors = append(sc.flavors, kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"pool": name}}})
	}
	quotas := func(allowEmpty bool) []kueue.ResourceGroup {
		fl := flavors
		if len(flavors) > 1 && r.IntN(2) == 0 {
			fl = []string{pick(r, flavors...)}
		}
		rg := kueue.ResourceGroup{}
		for _, res := range sc.resources {
			rg.CoveredResources = append(rg.CoveredResources, corev1.ResourceName(res))
		}
		for _, f := range fl {
			fq := kueue.FlavorQuotas{Name: kueue.ResourceFlavorReference(f)}
			for _, res := range sc.resources {
				n := r.IntN(9)
				if allowEmpty {
					n = r.IntN(3)
				}
				rq := kueue.ResourceQuota{Name: corev1.ResourceName(res), NominalQuota: q(n)}
				if r.IntN(3) == 0 {
					rq.BorrowingLimit = ptr.To(q(r.IntN(6)))
				}
				if r.IntN(4) == 0 {
					rq.LendingLimit = ptr.To(q(r.IntN(n + 1)))
				}
				fq.Resources = append(fq.Resources, rq)
			}
			rg.Flavors = append(rg.Flavors, fq)
		}
		return []kueue.ResourceGroup{rg}
	}
	// A tree of Cohorts: a root, children, grandchildren.
	cohorts := []string{"root"}
	sc.cohorts = append(sc.cohorts, kueue.Cohort{ObjectMeta: metav1.ObjectMeta{Name: "root"}})
	for i := range 1 + r.IntN(3) {
		name := fmt.Sprintf("c%d", i)
		co := kueue.Cohort{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.CohortSpec{ParentName: "root"}}
		if r.IntN(5) == 0 {
			co.Spec.ResourceGroups = quotas(true)
		}
		sc.cohorts = append(sc.cohorts, co)
		cohorts = append(cohorts, name)
		for j := range r.IntN(2) {
			gname := fmt.Sprintf("c%d%d", i, j)
			sc.cohorts = append(sc.cohorts, kueue.Cohort{ObjectMeta: metav1.ObjectMeta{Name: gname}, Spec: kueue.CohortSpec{ParentName: kueue.CohortReference(name)}})
			cohorts = append(cohorts, gname)
		}
	}
	policies := []kueue.PreemptionPolicy{kueue.PreemptionPolicyNever, kueue.PreemptionPolicyLowerPriority, kueue.PreemptionPolicyLowerOrNewerEqualPriority, kueue.PreemptionPolicyAny}
	nq := 2 + r.IntN(5)
	uid := 0
	for i := range nq {
		name := fmt.Sprintf("q%d", i)
		cq := kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ClusterQueueSpec{
			CohortName:        kueue.CohortReference(pick(r, cohorts...)),
			ResourceGroups:    quotas(false),
			NamespaceSelector: &metav1.LabelSelector{},
			Preemption: &kueue.ClusterQueuePreemption{
				WithinClusterQueue:  pick(r, policies[:3]...),
				ReclaimWithinCohort: pick(r, kueue.PreemptionPolicyNever, kueue.PreemptionPolicyLowerPriority, kueue.PreemptionPolicyAny),
			},
		}}
		switch r.IntN(4) {
		case 0:
			cq.Spec.Preemption.BorrowWithinCohort = &kueue.BorrowWithinCohort{Policy: kueue.BorrowWithinCohortPolicyLowerPriority}
		case 1:
			cq.Spec.Preemption.BorrowWithinCohort = &kueue.BorrowWithinCohort{Policy: kueue.BorrowWithinCohortPolicyLowerPriority, MaxPriorityThreshold: ptr.To(int32(r.IntN(3)))}
		}
		if r.IntN(3) == 0 {
			cq.Spec.FlavorFungibility = &kueue.FlavorFungibility{WhenCanBorrow: pick(r, kueue.MayStopSearch, kueue.TryNextFlavor), WhenCanPreempt: pick(r, kueue.MayStopSearch, kueue.TryNextFlavor)}
		}
		sc.queues = append(sc.queues, cq)
		// Admitted Workloads, on the queue's flavors; Kueue does not
		// check their usage against quota once admitted.
		cqFlavors := cq.Spec.ResourceGroups[0].Flavors
		for range r.IntN(6) {
			uid++
			f := pick(r, cqFlavors...).Name
			psa := kueue.PodSetAssignment{Name: "main", Count: ptr.To[int32](1), Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{}, ResourceUsage: corev1.ResourceList{}}
			for _, res := range sc.resources {
				psa.Flavors[corev1.ResourceName(res)] = f
				psa.ResourceUsage[corev1.ResourceName(res)] = q(1 + r.IntN(3))
			}
			w := kueue.Workload{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("w%03d", uid), UID: types.UID(fmt.Sprintf("uid-%03d", r.IntN(1000))),
					CreationTimestamp: metav1.NewTime(base.Add(time.Duration(r.IntN(5)) * time.Second))},
				Spec: kueue.WorkloadSpec{QueueName: "lq", Priority: ptr.To(int32(r.IntN(3))), PodSets: []kueue.PodSet{{Name: "main", Count: 1,
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}}}},
				Status: kueue.WorkloadStatus{Admission: &kueue.Admission{ClusterQueue: kueue.ClusterQueueReference(name), PodSetAssignments: []kueue.PodSetAssignment{psa}},
					Conditions: []metav1.Condition{
						{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.NewTime(base.Add(time.Duration(10+r.IntN(6)) * time.Second))},
						{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: metav1.NewTime(base.Add(20 * time.Second))},
					}},
			}
			// Distinct uids: the last tie-break of Kueue's order.
			w.UID = types.UID(fmt.Sprintf("uid-%03d-%s", r.IntN(1000), w.Name))
			if r.IntN(10) == 0 {
				w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: "Preempted", LastTransitionTime: metav1.NewTime(base.Add(30 * time.Second))})
			}
			sc.admitted = append(sc.admitted, w)
		}
	}
	target := sc.queues[r.IntN(len(sc.queues))]
	sc.targetCQ = target.Name
	reqs := corev1.ResourceList{}
	for _, res := range sc.resources {
		reqs[corev1.ResourceName(res)] = q(1 + r.IntN(7))
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: reqs}}}}
	if r.IntN(2) == 0 {
		spec.NodeSelector = map[string]string{"pool": pick(r, flavors...)}
	}
	sc.incoming = &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "incoming", UID: "uid-incoming", CreationTimestamp: metav1.NewTime(base.Add(time.Duration(r.IntN(8)) * time.Second))},
		Spec: kueue.WorkloadSpec{QueueName: "lq", Priority: ptr.To(int32(r.IntN(5))), PodSets: []kueue.PodSet{{Name: "main", Count: 1,
			Template: corev1.PodTemplateSpec{Spec: spec}}}},
	}
	return sc
}

type outcome struct {
	mode      int
	borrow    int
	usage     map[string]int64
	targets   []string
	available map[string]int64
}

// kueueOutcome is what Kueue v0.17's own code decides: its cache and
// snapshot, its flavor assigner with its preemption oracle, and its
// preemptor's targets.
func kueueOutcome(t *testing.T, sc *scenario) outcome {
	log := logr.Discard()
	ctx := logr.NewContext(context.Background(), log)
	cl := utiltesting.NewClientBuilder().WithLists(&kueue.WorkloadList{Items: sc.admitted}).Build()
	cache := schdcache.New(cl)
	for i := range sc.flavors {
		cache.AddOrUpdateResourceFlavor(log, &sc.flavors[i])
	}
	for i := range sc.queues {
		if err := cache.AddClusterQueue(ctx, &sc.queues[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sc.cohorts {
		if err := cache.AddOrUpdateCohort(&sc.cohorts[i]); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := cache.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := outcome{available: map[string]int64{}, usage: map[string]int64{}}
	for _, cq := range sc.queues {
		cs := snap.ClusterQueue(kueue.ClusterQueueReference(cq.Name))
		for _, f := range sc.flavors {
			for _, res := range sc.resources {
				fr := resources.FlavorResource{Flavor: kueue.ResourceFlavorReference(f.Name), Resource: corev1.ResourceName(res)}
				key := fmt.Sprintf("%s/%s@%s", cq.Name, res, f.Name)
				out.available[key+" available"] = cs.Available(fr)
				out.available[key+" potential"] = cs.PotentialAvailable(fr)
			}
		}
	}
	recorder := record.NewBroadcaster().NewRecorder(utiltesting.NewClientBuilder().Build().Scheme(), corev1.EventSource{Component: "test"})
	preemptor := preemption.New(cl, workload.Ordering{}, recorder, nil, false, clocktesting.NewFakeClock(base.Add(time.Hour)), nil, preemptexpectations.New(), nil)
	info := workload.NewInfo(sc.incoming)
	info.ClusterQueue = kueue.ClusterQueueReference(sc.targetCQ)
	cq := snap.ClusterQueue(info.ClusterQueue)
	assignment := flavorassigner.New(info, cq, snap.ResourceFlavors, false, preemption.NewOracle(preemptor, snap), nil).Assign(log, nil)
	out.mode, out.borrow = int(assignment.RepresentativeMode()), assignment.Borrows()
	for fr, v := range assignment.Usage.Quota {
		if v != 0 {
			out.usage[string(fr.Resource)+"@"+string(fr.Flavor)] = v
		}
	}
	if assignment.RepresentativeMode() == flavorassigner.Preempt {
		for _, tg := range preemptor.GetTargets(log, *info, assignment, snap) {
			out.targets = append(out.targets, tg.WorkloadInfo.Obj.Name+"/"+tg.Reason)
		}
	}
	slices.Sort(out.targets)
	return out
}

// simOutcome is the same question asked of the port.
func simOutcome(sc *scenario) outcome {
	var ws []*kueuesim.Workload
	for i := range sc.admitted {
		w, st := kueuesim.FromAPI(&sc.admitted[i])
		if st == kueuesim.Holding {
			ws = append(ws, w)
		}
	}
	sim := kueuesim.New(kueuesim.Objects{Cohorts: sc.cohorts, ClusterQueues: sc.queues, Flavors: sc.flavors}, ws, base.Add(time.Hour))
	out := outcome{available: map[string]int64{}, usage: map[string]int64{}}
	for _, cq := range sc.queues {
		sq := sim.Queue(cq.Name)
		for _, f := range sc.flavors {
			for _, res := range sc.resources {
				fr := kueuesim.FR{Flavor: f.Name, Resource: res}
				key := fmt.Sprintf("%s/%s@%s", cq.Name, res, f.Name)
				out.available[key+" available"] = sq.Available(fr)
				out.available[key+" potential"] = sq.MaxCapacity(fr)
			}
		}
	}
	in, _ := kueuesim.FromAPI(sc.incoming)
	in.Queue = sc.targetCQ
	a, targets := sim.Nominate(in)
	out.mode, out.borrow = int(a.Mode), a.Borrow
	for _, u := range a.Usage {
		out.usage[u.FR.String()] = u.V
	}
	for _, tg := range targets {
		out.targets = append(out.targets, tg.W.Name+"/"+tg.Reason)
	}
	slices.Sort(out.targets)
	return out
}

// TestMatchesKueue runs Kueue's own cache, flavor assigner and preemptor
// and the port on the same random configurations, and compares what each
// makes of them: every queue's available and potential quota, the incoming
// Workload's assignment (mode, borrowing level, flavors) and the Workloads
// its preemption would evict.
func TestMatchesKueue(t *testing.T) {
	n, preempting, modes := 3000, 0, map[int]int{}
	if testing.Short() {
		n = 300
	}
	for seed := range uint64(n) {
		sc := randomScenario(seed)
		want, got := kueueOutcome(t, sc), simOutcome(sc)
		if len(want.targets) > 0 {
			preempting++
		}
		modes[want.mode]++
		if !maps.Equal(want.available, got.available) {
			for k := range want.available {
				if want.available[k] != got.available[k] {
					t.Errorf("seed %d: %s: Kueue %d, port %d", seed, k, want.available[k], got.available[k])
				}
			}
			continue
		}
		if want.mode != got.mode || want.borrow != got.borrow || !maps.Equal(want.usage, got.usage) || !slices.Equal(want.targets, got.targets) {
			t.Errorf("seed %d (incoming in %s):\nKueue: mode %d borrow %d usage %v targets %v\nport:  mode %d borrow %d usage %v targets %v",
				seed, sc.targetCQ, want.mode, want.borrow, want.usage, want.targets, got.mode, got.borrow, got.usage, got.targets)
		}
	}
	// The comparison means something only if preemption happened often.
	t.Logf("%d scenarios, %d with preemption targets; modes NoFit %d, Preempt %d, Fit %d", n, preempting, modes[0], modes[1], modes[2])
	if preempting < n/10 {
		t.Fatalf("only %d of %d scenarios preempted anything: the generator does not exercise preemption", preempting, n)
	}
}
