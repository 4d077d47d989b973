package sources

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"

	"ome.io/quota-manager/events"
)

// DeviceClasses handles DRA DeviceClass notifications.
func (h *Handlers) DeviceClasses() cache.ResourceEventHandler {
	return handler(h, events.KindDeviceClass, DeviceClassOf, events.DeviceClassUpserted)
}

// ResourceSlices handles DRA ResourceSlice notifications.
func (h *Handlers) ResourceSlices() cache.ResourceEventHandler {
	return handler(h, events.KindResourceSlice, ResourceSliceOf, events.ResourceSliceUpserted)
}

// DeviceClassOf is the compact form of a DeviceClass: its CEL selectors and
// its extended resource name.
func DeviceClassOf(c *resourcev1.DeviceClass) *events.DeviceClass {
	out := &events.DeviceClass{Name: c.Name}
	for _, s := range c.Spec.Selectors {
		if s.CEL != nil {
			out.Selectors = append(out.Selectors, s.CEL.Expression)
		}
	}
	if c.Spec.ExtendedResourceName != nil {
		out.ExtendedResourceName = *c.Spec.ExtendedResourceName
	}
	return out
}

// ResourceSliceOf is the compact form of a ResourceSlice: its pool, node
// selection, devices (what CEL selectors read, the counters they consume)
// and shared counter sets, deep-copied.
func ResourceSliceOf(s *resourcev1.ResourceSlice) *events.ResourceSlice {
	out := &events.ResourceSlice{
		Name: s.Name, Driver: s.Spec.Driver,
		Pool: s.Spec.Pool.Name, Generation: s.Spec.Pool.Generation, SliceCount: s.Spec.Pool.ResourceSliceCount,
		Access: access(s.Spec.NodeName, s.Spec.AllNodes, s.Spec.NodeSelector),
	}
	out.Access.PerDevice = s.Spec.PerDeviceNodeSelection != nil && *s.Spec.PerDeviceNodeSelection
	for _, cs := range s.Spec.SharedCounters {
		out.SharedCounters = append(out.SharedCounters, *cs.DeepCopy())
	}
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		dev := events.Device{Name: d.Name, AllowMultipleAllocations: d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations}
		if len(d.Attributes) > 0 {
			dev.Attributes = make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(d.Attributes))
			for k, a := range d.Attributes {
				dev.Attributes[k] = *a.DeepCopy()
			}
		}
		if len(d.Capacity) > 0 {
			dev.Capacity = make(map[resourcev1.QualifiedName]resource.Quantity, len(d.Capacity))
			for k, c := range d.Capacity {
				dev.Capacity[k] = c.Value.DeepCopy()
			}
		}
		for _, c := range d.ConsumesCounters {
			dev.ConsumesCounters = append(dev.ConsumesCounters, *c.DeepCopy())
		}
		if out.Access.PerDevice {
			a := access(d.NodeName, d.AllNodes, d.NodeSelector)
			dev.Access = &a
		}
		out.Devices = append(out.Devices, dev)
	}
	return out
}

func access(node *string, all *bool, sel *corev1.NodeSelector) events.Access {
	var a events.Access
	if node != nil {
		a.NodeName = *node
	}
	a.AllNodes = all != nil && *all
	if sel != nil {
		a.NodeSelector = sel.DeepCopy()
	}
	return a
}
