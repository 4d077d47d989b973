package manager

import (
	"testing"

	"ome.io/quota-manager/events"
)

// TestMappingsDiff names each mapping that differs, either way, and none
// when the two differ only in order.
func TestMappingsDiff(t *testing.T) {
	gpu := events.DeviceClassMapping{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com"}}
	mig := events.DeviceClassMapping{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com", "mig.nvidia.com"}}
	mem := events.DeviceClassMapping{Name: "gpu.memory", DeviceClassNames: []string{"mig.nvidia.com", "gpu.nvidia.com"}}
	memSorted := events.DeviceClassMapping{Name: "gpu.memory", DeviceClassNames: []string{"gpu.nvidia.com", "mig.nvidia.com"}}
	for _, tc := range []struct {
		name         string
		ours, theirs []events.DeviceClassMapping
		want         string
	}{
		{"same, in another order", []events.DeviceClassMapping{gpu, mem}, []events.DeviceClassMapping{memSorted, gpu}, ""},
		{"ours only", []events.DeviceClassMapping{gpu, mem}, []events.DeviceClassMapping{gpu}, "gpu.memory is the quota manager's only"},
		{"Kueue's only", nil, []events.DeviceClassMapping{gpu}, "nvidia.com/gpu is Kueue's only"},
		{"other classes", []events.DeviceClassMapping{gpu}, []events.DeviceClassMapping{mig},
			"nvidia.com/gpu maps [gpu.nvidia.com] here and [gpu.nvidia.com mig.nvidia.com] in Kueue"},
	} {
		if got := mappingsDiff(tc.ours, tc.theirs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
