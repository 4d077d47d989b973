package events

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DeviceClass is the compact form of a DRA DeviceClass (resource.k8s.io/v1):
// the CEL selectors a device must all pass to belong to it, and the
// extended resource name it is requested through, if any.
type DeviceClass struct {
	Name string `json:"name"`
	// Selectors are spec.selectors[*].cel.expression, in order.
	Selectors []string `json:"selectors,omitempty"`
	// ExtendedResourceName is spec.extendedResourceName.
	ExtendedResourceName string `json:"extendedResourceName,omitempty"`
}

// ResourceSlice is the compact form of a DRA ResourceSlice: its pool, where
// its devices are reachable from, the devices with what CEL selectors read
// of them, and the shared counter sets.
type ResourceSlice struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// Pool, Generation and SliceCount are spec.pool.
	Pool       string `json:"pool"`
	Generation int64  `json:"generation"`
	SliceCount int64  `json:"sliceCount"`
	// Access says which nodes reach the devices (for a per-device slice,
	// each device has its own).
	Access  Access   `json:"access"`
	Devices []Device `json:"devices,omitempty"`
	// SharedCounters is spec.sharedCounters.
	SharedCounters []resourcev1.CounterSet `json:"sharedCounters,omitempty"`
}

// Access is a slice's (or a device's) node selection: exactly one of its
// fields is set, or PerDevice on a slice whose devices set their own.
type Access struct {
	NodeName     string               `json:"nodeName,omitempty"`
	AllNodes     bool                 `json:"allNodes,omitempty"`
	NodeSelector *corev1.NodeSelector `json:"nodeSelector,omitempty"`
	PerDevice    bool                 `json:"perDevice,omitempty"`
}

// Device is one device of a slice.
type Device struct {
	Name       string                                                  `json:"name"`
	Attributes map[resourcev1.QualifiedName]resourcev1.DeviceAttribute `json:"attributes,omitempty"`
	Capacity   map[resourcev1.QualifiedName]resource.Quantity          `json:"capacity,omitempty"`
	// ConsumesCounters is spec.devices[*].consumesCounters.
	ConsumesCounters []resourcev1.DeviceCounterConsumption `json:"consumesCounters,omitempty"`
	// Access is set only in a slice with per-device node selection.
	Access *Access `json:"access,omitempty"`
	// AllowMultipleAllocations is read by CEL selectors.
	AllowMultipleAllocations bool `json:"allowMultipleAllocations,omitempty"`
}

// DeviceClassUpserted is a DeviceClass added or updated.
func DeviceClassUpserted(t time.Time, c *DeviceClass) Event {
	return Event{Time: t, Kind: KindDeviceClass, Op: OpUpsert, Key: c.Name, DeviceClass: c}
}

// ResourceSliceUpserted is a ResourceSlice added or updated.
func ResourceSliceUpserted(t time.Time, s *ResourceSlice) Event {
	return Event{Time: t, Kind: KindResourceSlice, Op: OpUpsert, Key: s.Name, ResourceSlice: s}
}

// Counter source types of a mapping.
const SourceCounter = "Counter"

// Device selector types of a counter source.
const SelectorCEL = "CEL"

// DeviceClassMapping maps DeviceClasses to a logical resource name that
// budgets and Kueue's ClusterQueues count, in the shape of Kueue's
// configuration (resources.deviceClassMappings). Without sources, each
// device the classes select counts 1; with Counter sources, capacity is the
// named counter summed over the shared counter sets the selected devices
// consume.
type DeviceClassMapping struct {
	Name             string          `json:"name"`
	DeviceClassNames []string        `json:"deviceClassNames"`
	Sources          []MappingSource `json:"sources,omitempty"`
}

// MappingSource is one source of a mapping's capacity.
type MappingSource struct {
	Type    string         `json:"type"`
	Counter *CounterSource `json:"counter,omitempty"`
}

// CounterSource names a counter of a driver's shared counter sets, and
// which devices' counter sets count.
type CounterSource struct {
	Name           string          `json:"name"`
	Driver         string          `json:"driver"`
	DeviceSelector *DeviceSelector `json:"deviceSelector,omitempty"`
}

// DeviceSelector selects devices with a CEL expression.
type DeviceSelector struct {
	Type string       `json:"type"`
	CEL  *CELSelector `json:"cel,omitempty"`
}

// CELSelector is a CEL expression over `device`, as in a DeviceClass.
type CELSelector struct {
	Expression string `json:"expression"`
}

// Expression is the selector's CEL expression, "" for none.
func (c *CounterSource) Expression() string {
	if c.DeviceSelector == nil || c.DeviceSelector.CEL == nil {
		return ""
	}
	return c.DeviceSelector.CEL.Expression
}

func mappingsEqual(a, b []DeviceClassMapping) bool {
	return slices.EqualFunc(a, b, func(x, y DeviceClassMapping) bool {
		return x.Name == y.Name && slices.Equal(x.DeviceClassNames, y.DeviceClassNames) &&
			slices.EqualFunc(x.Sources, y.Sources, func(s, t MappingSource) bool {
				if s.Type != t.Type || (s.Counter == nil) != (t.Counter == nil) {
					return false
				}
				return s.Counter == nil || (s.Counter.Name == t.Counter.Name && s.Counter.Driver == t.Counter.Driver &&
					s.Counter.Expression() == t.Counter.Expression())
			})
	})
}

// validateMappings reports the first thing wrong with a list of mappings,
// saying what to fix in the DRA configuration.
func validateMappings(ms []DeviceClassMapping) error {
	seen := map[string]bool{}
	for i, m := range ms {
		if errs := validation.IsQualifiedName(m.Name); len(errs) > 0 {
			return fmt.Errorf("deviceClassMappings[%d]: name %q is not a resource name: %s", i, m.Name, errs[0])
		}
		if seen[m.Name] {
			return fmt.Errorf("deviceClassMappings[%d]: name %q is mapped twice: list all its DeviceClasses in one mapping", i, m.Name)
		}
		seen[m.Name] = true
		if len(m.DeviceClassNames) == 0 {
			return fmt.Errorf("deviceClassMappings[%d] (%s): deviceClassNames is empty: name at least one DeviceClass", i, m.Name)
		}
		for _, c := range m.DeviceClassNames {
			if errs := validation.IsDNS1123Subdomain(c); len(errs) > 0 {
				return fmt.Errorf("deviceClassMappings[%d] (%s): %q is not a DeviceClass name: %s", i, m.Name, c, errs[0])
			}
		}
		for j, s := range m.Sources {
			switch {
			case s.Type != SourceCounter:
				return fmt.Errorf("deviceClassMappings[%d] (%s): sources[%d] has type %q: the only type is %q", i, m.Name, j, s.Type, SourceCounter)
			case s.Counter == nil || s.Counter.Name == "" || s.Counter.Driver == "":
				return fmt.Errorf("deviceClassMappings[%d] (%s): sources[%d] needs counter.name and counter.driver", i, m.Name, j)
			case s.Counter.DeviceSelector != nil && (s.Counter.DeviceSelector.Type != SelectorCEL || s.Counter.DeviceSelector.CEL == nil || s.Counter.DeviceSelector.CEL.Expression == ""):
				return fmt.Errorf("deviceClassMappings[%d] (%s): sources[%d].counter.deviceSelector must be type %q with a cel.expression", i, m.Name, j, SelectorCEL)
			}
		}
	}
	return nil
}
