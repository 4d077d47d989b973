package dra

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

// kueueMappings are Kueue's deviceClassMappings. Kueue v0.17 maps a
// DeviceClass to one name and has no counter sources, so gpu.memory is
// the manager's alone.
var kueueMappings = []kueueconfig.DeviceClassMapping{{Name: "nvidia.com/gpu", DeviceClassNames: []corev1.ResourceName{"gpu.nvidia.com"}}}

func TestMain(m *testing.M) {
	opts := localcluster.Options{
		Kueue: true,
		// resource.k8s.io/v1 is on by default in 1.35; shared counters and
		// extendedResourceName are alpha fields, dropped unless their gates
		// are on.
		APIServerArgs:            map[string]string{"feature-gates": "DRAPartitionableDevices=true,DRAExtendedResource=true"},
		KueueFeatureGates:        map[string]bool{"DynamicResourceAllocation": true, "DRAExtendedResources": true},
		KueueDeviceClassMappings: kueueMappings,
		Namespaces:               []string{"ome", teamNS},
	}
	localcluster.Main(m, opts, true, func(_ context.Context, c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}
