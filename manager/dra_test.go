package manager

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/events"
)

func TestParseDRAConfig(t *testing.T) {
	gpu := events.DeviceClassMapping{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com"}}
	mem := events.DeviceClassMapping{Name: "gpu.memory", DeviceClassNames: []string{"gpu.nvidia.com", "mig.nvidia.com"},
		Sources: []events.MappingSource{{Type: "Counter", Counter: &events.CounterSource{Name: "memory", Driver: "gpu.nvidia.com",
			DeviceSelector: &events.DeviceSelector{Type: "CEL", CEL: &events.CELSelector{Expression: "device.driver == 'gpu.nvidia.com'"}}}}}}
	tests := map[string]struct {
		in   string
		want []events.DeviceClassMapping
		err  string
	}{
		"own": {in: `
deviceClassMappings:
- name: nvidia.com/gpu
  deviceClassNames: [gpu.nvidia.com]
- name: gpu.memory
  deviceClassNames: [gpu.nvidia.com, mig.nvidia.com]
  sources:
  - type: Counter
    counter:
      name: memory
      driver: gpu.nvidia.com
      deviceSelector:
        type: CEL
        cel:
          expression: "device.driver == 'gpu.nvidia.com'"
`, want: []events.DeviceClassMapping{gpu, mem}},
		"kueue configuration": {in: `
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
featureGates:
  DynamicResourceAllocation: true
resources:
  deviceClassMappings:
  - name: nvidia.com/gpu
    deviceClassNames: [gpu.nvidia.com]
`, want: []events.DeviceClassMapping{gpu}},
		"kueue operator object": {in: `
apiVersion: kueue.openshift.io/v1
kind: Kueue
metadata: {name: cluster, namespace: openshift-kueue-operator}
spec:
  config:
    resources:
      deviceClassMappings:
      - name: nvidia.com/gpu
        deviceClassNames: [gpu.nvidia.com]
`, want: []events.DeviceClassMapping{gpu}},
		"kueue configuration without mappings": {in: "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"},
		"typo":                                 {in: "deviceClassMapping: []\n", err: `unknown field "deviceClassMapping"`},
		"other kind":                           {in: "kind: ConfigMap\n", err: `kind "ConfigMap": give a file with deviceClassMappings`},
		"no classes":                           {in: "deviceClassMappings: [{name: nvidia.com/gpu, deviceClassNames: []}]\n", err: "name at least one DeviceClass; fix --dra-config"},
		"twice":                                {in: "deviceClassMappings: [{name: a, deviceClassNames: [x]}, {name: a, deviceClassNames: [y]}]\n", err: `"a" is mapped twice`},
		"bad source type":                      {in: "deviceClassMappings: [{name: a, deviceClassNames: [x], sources: [{type: Gauge}]}]\n", err: `the only type is "Counter"`},
		"bad CEL":                              {in: "deviceClassMappings: [{name: a, deviceClassNames: [x], sources: [{type: Counter, counter: {name: m, driver: d, deviceSelector: {type: CEL, cel: {expression: 'device.driver =='}}}}]}]\n", err: "does not compile"},
		"bad name":                             {in: "deviceClassMappings: [{name: 'not a name!', deviceClassNames: [x]}]\n", err: "is not a resource name"},
		"bad class name":                       {in: "deviceClassMappings: [{name: a, deviceClassNames: [Not_A_Class]}]\n", err: "is not a DeviceClass name"},
		"counter, no name":                     {in: "deviceClassMappings: [{name: a, deviceClassNames: [x], sources: [{type: Counter, counter: {driver: d}}]}]\n", err: "needs counter.name and counter.driver"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDRAConfig([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mappings (-want +got):\n%s", diff)
			}
		})
	}
}
