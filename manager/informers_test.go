package manager

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
)

// A Node as a kubelet reports it is cached as its compact form, the
// record its events carry, with the name and resourceVersion the informer
// reads; nothing else of it is kept.
func TestSlimCoreCachesTheRecord(t *testing.T) {
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64")}
	half := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("63")}
	now := metav1.Now()
	inf := &informerSet{}
	for _, ready := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse} {
		full := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: "gpu-1", UID: "u1", ResourceVersion: "42",
				Labels:        map[string]string{"nvidia.com/gpu.product": "A100"},
				Annotations:   map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
			},
			Spec: corev1.NodeSpec{Unschedulable: true, PodCIDR: "10.0.0.0/24", Taints: []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Capacity: gpus, Allocatable: half,
				Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now},
					{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now},
				},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
				Images:    []corev1.ContainerImage{{Names: []string{"registry.example/cuda:12"}, SizeBytes: 1 << 30}},
				NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.35.0"},
			},
		}
		want := sources.NodeOf(full)
		obj, err := inf.slimCore(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		c := obj.(*sources.CachedNode)
		if !reflect.DeepEqual(c.Node, want) {
			t.Fatalf("ready=%s: the record is not the compact form:\n got %+v\nwant %+v", ready, c.Node, want)
		}
		if c.Name != "gpu-1" || c.ResourceVersion != "42" {
			t.Fatalf("the cache needs the name and resourceVersion: got %q, %q", c.Name, c.ResourceVersion)
		}
		// Transforming again changes nothing.
		if again, _ := inf.slimCore(c); again != obj {
			t.Fatalf("not idempotent: %+v", again)
		}
	}
}

// Nodes with equal resource lists share one copy of each; a Node with
// lists of its own keeps them, labels are never shared, and the table stays
// bounded.
func TestSlimCoreSharesEqualResourceLists(t *testing.T) {
	inf := &informerSet{}
	node := func(name, gpus string, labels map[string]string) *events.Node {
		rl := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), corev1.ResourceCPU: resource.MustParse("64")}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl.DeepCopy()}}
		obj, err := inf.slimCore(n)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*sources.CachedNode).Node
	}
	same := func(a, b any) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }
	pool := map[string]string{"pool": "a100"}
	a := node("a", "8", maps.Clone(pool))
	b := node("b", "8", maps.Clone(pool))
	if !same(a.Capacity, b.Capacity) || !same(a.Allocatable, b.Allocatable) || !same(a.Capacity, a.Allocatable) {
		t.Fatal("equal resource lists are not shared")
	}
	if same(a.Labels, b.Labels) {
		t.Fatal("label sets shared")
	}
	c := node("c", "4", maps.Clone(pool))
	if same(a.Capacity, c.Capacity) {
		t.Fatal("different lists shared")
	}
	if c.Capacity["nvidia.com/gpu"] != resource.MustParse("4") || a.Capacity["nvidia.com/gpu"] != resource.MustParse("8") {
		t.Fatalf("values changed: %+v, %+v", a.Capacity, c.Capacity)
	}
	for i := range 3 * maxSharedLists {
		node(fmt.Sprint("n", i), fmt.Sprint(i+1), nil)
	}
	if n := len(inf.lists.lists); n > maxSharedLists {
		t.Fatalf("the table grew past its bound: %d lists", n)
	}
}

// Other core objects (the DRA ones) keep everything but managedFields.
func TestSlimCoreOtherObjects(t *testing.T) {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "driver"}}}, Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com"}}
	obj, err := (&informerSet{}).slimCore(s)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*resourcev1.ResourceSlice)
	if got.ManagedFields != nil || got.Spec.Driver != "gpu.example.com" || got.Labels["a"] != "b" {
		t.Fatalf("got %+v", got)
	}
}

// Kueue objects keep their spec, labels and resourceVersion (what the
// applier compares and the drift handler reads); a ClusterQueue keeps the
// usage the event sources read, and the statuses nothing reads are gone.
func TestSlimKueue(t *testing.T) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "t1", Namespace: "ns", ResourceVersion: "7", Generation: 3,
			Labels: map[string]string{"ome.io/managed-by": "ome-quota-manager"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kueue"}}}
	}
	cond := []metav1.Condition{{Type: "Active", Status: metav1.ConditionTrue, Reason: "Ready", Message: "Can submit new workloads"}}
	usage := []kueuev1beta2.FlavorUsage{{Name: "a100", Resources: []kueuev1beta2.ResourceUsage{{Name: "nvidia.com/gpu", Total: resource.MustParse("3")}}}}
	cq := &kueuev1beta2.ClusterQueue{ObjectMeta: meta(), Spec: kueuev1beta2.ClusterQueueSpec{CohortName: "c1"},
		Status: kueuev1beta2.ClusterQueueStatus{Conditions: cond, PendingWorkloads: 4, FlavorsUsage: usage, FlavorsReservation: usage}}
	want := sources.QueueOf(cq)
	obj, err := slimKueue(cq)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*kueuev1beta2.ClusterQueue)
	if q := sources.QueueOf(got); !reflect.DeepEqual(q, want) {
		t.Fatalf("the ClusterQueue's usage changed:\n got %+v\nwant %+v", q, want)
	}
	if got.Status.Conditions != nil || got.Status.PendingWorkloads != 0 || got.ManagedFields != nil || got.Spec.CohortName != "c1" || got.ResourceVersion != "7" || got.Generation != 3 {
		t.Fatalf("ClusterQueue: %+v", got)
	}
	lq := &kueuev1beta2.LocalQueue{ObjectMeta: meta(), Spec: kueuev1beta2.LocalQueueSpec{ClusterQueue: "t1"},
		Status: kueuev1beta2.LocalQueueStatus{Conditions: cond, PendingWorkloads: 2}}
	obj, _ = slimKueue(lq)
	gl := obj.(*kueuev1beta2.LocalQueue)
	if !reflect.DeepEqual(gl.Status, kueuev1beta2.LocalQueueStatus{}) || gl.Spec.ClusterQueue != "t1" || len(gl.Labels) != 1 || gl.ManagedFields != nil || gl.Generation != 3 {
		t.Fatalf("LocalQueue: %+v", gl)
	}
	co := &kueuev1beta2.Cohort{ObjectMeta: meta(), Spec: kueuev1beta2.CohortSpec{ParentName: "root"},
		Status: kueuev1beta2.CohortStatus{FairSharing: &kueuev1beta2.FairSharingStatus{WeightedShare: 5}}}
	obj, _ = slimKueue(co)
	gc := obj.(*kueuev1beta2.Cohort)
	if gc.Status.FairSharing != nil || gc.Spec.ParentName != "root" || gc.ManagedFields != nil {
		t.Fatalf("Cohort: %+v", gc)
	}
}
