package manager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/test/flagtest"
)

func TestParseDRAConfig(t *testing.T) {
	gpu := events.DeviceClassMapping{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com"}}
	mem := events.DeviceClassMapping{Name: "gpu.memory", DeviceClassNames: []string{"gpu.nvidia.com", "mig.nvidia.com"},
		Sources: []events.MappingSource{{Type: "Counter", Counter: &events.CounterSource{Name: "memory", Driver: "gpu.nvidia.com",
			DeviceSelector: &events.DeviceSelector{Type: "CEL", CEL: &events.CELSelector{Expression: "device.driver == 'gpu.nvidia.com'"}}}}}}
	// The guide's file, in the manager's own format.
	guide, err := os.ReadFile("../config/samples/dra-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		in   string
		want []events.DeviceClassMapping
		err  string
	}{
		"own": {in: string(guide), want: []events.DeviceClassMapping{gpu, mem}},
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

func TestDRAFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("deviceClassMappings: [{name: nvidia.com/gpu, deviceClassNames: [gpu.nvidia.com]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("deviceClassMappings: [{name: nvidia.com/gpu}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		want string // "" means valid
	}{
		"mappings":        {[]string{"--dra-config=" + good}, ""},
		"missing file":    {[]string{"--dra-config=" + filepath.Join(dir, "nope.yaml")}, "--dra-config: open"},
		"bad file":        {[]string{"--dra-config=" + bad}, "--dra-config " + bad + ": deviceClassMappings[0] (nvidia.com/gpu): deviceClassNames is empty"},
		"dra off":         {[]string{"--dra-config=" + good, "--dra=false"}, "--dra-config is set but --dra=false"},
		"negative poll":   {[]string{"--dra-config=" + good, "--dra-config-poll-interval=-1s"}, "--dra-config-poll-interval must not be negative"},
		"no file, no dra": {[]string{"--dra=false"}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			flagtest.WantError(t, flagtest.Validate(t, o, append([]string{"--mode=workload"}, tc.args...)...), tc.want)
			if name == "mappings" {
				if got := o.EventsConfig().DeviceClassMappings; len(got) != 1 || got[0].Name != "nvidia.com/gpu" {
					t.Errorf("the Config event carries mappings %+v", got)
				}
			}
		})
	}
}
