package manager

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/events/sources"
)

// A Node as a kubelet reports it loses in the cache everything the event
// sources do not read, and its compact form stays the same.
func TestSlimCoreKeepsWhatNodeOfReads(t *testing.T) {
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64")}
	half := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("63")}
	now := metav1.Now()
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
		obj, err := slimCore(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		slim := obj.(*corev1.Node)
		if got := sources.NodeOf(slim); !reflect.DeepEqual(got, want) {
			t.Fatalf("ready=%s: the compact form changed:\n got %+v\nwant %+v", ready, got, want)
		}
		if slim.ResourceVersion != "42" || slim.UID != "u1" {
			t.Fatalf("the cache needs resourceVersion and uid: got %q, %q", slim.ResourceVersion, slim.UID)
		}
		if len(slim.Annotations)+len(slim.ManagedFields)+len(slim.Spec.Taints)+len(slim.Status.Images)+len(slim.Status.Addresses) != 0 ||
			slim.Status.NodeInfo.KubeletVersion != "" || len(slim.Status.Conditions) != 1 || !slim.Status.Conditions[0].LastHeartbeatTime.IsZero() {
			t.Fatalf("fields nothing reads kept: %+v", slim)
		}
		// Transforming again changes nothing.
		again, _ := slimCore(slim.DeepCopy())
		if !reflect.DeepEqual(again, slim) {
			t.Fatalf("not idempotent:\n%+v\n%+v", again, slim)
		}
	}
}

// Other core objects (the DRA ones) keep everything but managedFields.
func TestSlimCoreOtherObjects(t *testing.T) {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "driver"}}}, Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com"}}
	obj, err := slimCore(s)
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
