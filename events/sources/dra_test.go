package sources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"ome.io/quota-manager/events"
)

func ptr[T any](v T) *T { return &v }

func TestDRAHandlers(t *testing.T) {
	h, rec, errs := newHandlers()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourcev1.DeviceClassSpec{
		Selectors:            []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == 'gpu.nvidia.com'"}}, {}},
		ExtendedResourceName: ptr("nvidia.com/gpu"),
	}}
	h.DeviceClasses().OnAdd(dc, true)
	// A change of the class's config only: nothing the state reads.
	same := dc.DeepCopy()
	same.Spec.Config = []resourcev1.DeviceClassConfiguration{{}}
	h.DeviceClasses().OnUpdate(dc, same)

	memory := map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}}
	rs := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-gpus"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.nvidia.com", Pool: resourcev1.ResourcePool{Name: "n1", Generation: 3, ResourceSliceCount: 2},
		PerDeviceNodeSelection: ptr(true),
		Devices: []resourcev1.Device{{
			Name:             "gpu-0",
			NodeName:         ptr("n1"),
			Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: ptr("gpu")}},
			Capacity:         map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: memory}},
		}, {
			Name:         "fabric-0",
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}}}},
		}},
	}}
	h.ResourceSlices().OnAdd(rs, true)
	h.ResourceSlices().OnDelete(cache.DeletedFinalStateUnknown{Key: "n1-gpus"})

	if diff := cmp.Diff([]string{"#0 DeviceClass upsert gpu.nvidia.com", "#0 ResourceSlice upsert n1-gpus", "#0 ResourceSlice delete n1-gpus"}, rec.summary()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&events.DeviceClass{Name: "gpu.nvidia.com", Selectors: []string{"device.driver == 'gpu.nvidia.com'"}, ExtendedResourceName: "nvidia.com/gpu"}, rec.events[0].DeviceClass); diff != "" {
		t.Errorf("class (-want +got):\n%s", diff)
	}
	want := &events.ResourceSlice{Name: "n1-gpus", Driver: "gpu.nvidia.com", Pool: "n1", Generation: 3, SliceCount: 2,
		Access: events.Access{PerDevice: true},
		Devices: []events.Device{{
			Name:             "gpu-0",
			Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: ptr("gpu")}},
			Capacity:         map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: memory}},
			Access:           &events.Access{NodeName: "n1"},
		}, {
			Name:   "fabric-0",
			Access: &events.Access{NodeSelector: rs.Spec.Devices[1].NodeSelector},
		}},
	}
	if diff := cmp.Diff(want, rec.events[1].ResourceSlice, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("slice (-want +got):\n%s", diff)
	}
	// The compact form is a copy: changing the informer's object changes
	// nothing published.
	rs.Spec.Devices[0].Attributes["type"] = resourcev1.DeviceAttribute{StringValue: ptr("mig")}
	if got := *rec.events[1].ResourceSlice.Devices[0].Attributes["type"].StringValue; got != "gpu" {
		t.Errorf("the published slice shares the informer's attribute map: type is %q", got)
	}
	if len(*errs) != 0 {
		t.Errorf("unexpected errors: %v", *errs)
	}
}
