package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const (
	driver   = "gpu.nvidia.com"
	flavor   = "a100-40"
	teamNS   = "dra-team-ns"
	capPath  = `jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.allocatable}{" "}{.highWaterMark}{"\n"}{end}`
	gpuClass = `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`
	migClass = `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'`
)

var labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}

func ptr[T any](v T) *T { return &v }

func str(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &s} }

func memory(q string) map[string]resourcev1.Counter {
	return map[string]resourcev1.Counter{"memory": {Value: resource.MustParse(q)}}
}

// nodeSlices are what an NVIDIA DRA driver with MIG publishes for a node of
// eight A100-40GB: a slice of eight shared counter sets (40Gi of memory
// each) and a slice of devices: each whole GPU consumes all of its set, and
// two 1g.5gb partitions per GPU consume 5Gi of it each.
func nodeSlices(node string) []*resourcev1.ResourceSlice {
	pool := resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	sets := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-counters"},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: pool, NodeName: ptr(node)}}
	devs := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-devices"},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: pool, NodeName: ptr(node)}}
	for g := range 8 {
		set := fmt.Sprintf("gpu-%d", g)
		sets.Spec.SharedCounters = append(sets.Spec.SharedCounters, resourcev1.CounterSet{Name: set, Counters: memory("40Gi")})
		devs.Spec.Devices = append(devs.Spec.Devices, resourcev1.Device{Name: set,
			Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": str("gpu"), "profile": str("7g.40gb")},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: memory("40Gi")}}})
		for p := range 2 {
			devs.Spec.Devices = append(devs.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("%s-mig-%d", set, p),
				Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": str("mig"), "profile": str("1g.5gb")},
				ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: memory("5Gi")}}})
		}
	}
	return []*resourcev1.ResourceSlice{sets, devs}
}

func deviceClass(name, expr, ext string) *resourcev1.DeviceClass {
	c := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}}}}
	if ext != "" {
		c.Spec.ExtendedResourceName = &ext
	}
	return c
}

func applyYAML(t *testing.T, doc string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "objects.yaml")
	require.NoError(t, os.WriteFile(f, []byte(doc), 0o600))
	testutil.Kubectl(t, cluster, "apply", "-f", f)
}

func readyReason(t *testing.T, name string) string {
	aq, err := cluster.AQs.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range aq.Status.Conditions {
		if c.Type == v1beta1.ConditionReady {
			return string(c.Status) + " " + c.Reason
		}
	}
	return "no Ready condition"
}

// TestDRA walks the DRA guide on the local control plane, in order, with
// one manager process: capacity from ResourceSlices, a budget above it,
// slices going away, unbudgeted devices, a configuration change, and Kueue
// admitting ResourceClaimTemplate and extended-resource workloads.
func TestDRA(t *testing.T) {
	ctx := context.Background()
	rs := cluster.Kube.ResourceV1()
	_, err := cluster.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: flavor}, Spec: kueuev1beta2.ResourceFlavorSpec{NodeLabels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := 1; i <= 4; i++ {
		node := fmt.Sprintf("dra-node-%d", i)
		// No GPUs in the Node's status: the driver publishes them.
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.FakeNode{Name: node, Labels: labels})
		require.NoError(t, err)
		for _, sl := range nodeSlices(node) {
			got, err := rs.ResourceSlices().Create(ctx, sl, metav1.CreateOptions{})
			require.NoError(t, err)
			require.Equal(t, len(sl.Spec.SharedCounters), len(got.Spec.SharedCounters), "the API server dropped sharedCounters: is DRAPartitionableDevices on?")
		}
	}
	for _, c := range []*resourcev1.DeviceClass{
		// Also requested as example.com/gpu-dp; the explicit mapping to
		// nvidia.com/gpu wins, for the manager and for Kueue.
		deviceClass("gpu.nvidia.com", gpuClass, "example.com/gpu-dp"),
		deviceClass("mig.nvidia.com", migClass, ""),
		// Requested as example.com/gpu through the extended-resource path.
		deviceClass("gpu-ext.nvidia.com", gpuClass, "example.com/gpu"),
		// No mapping names it: its devices are unbudgeted.
		deviceClass("fpga.example.com", "device.driver == 'fpga.example.com'", ""),
	} {
		got, err := rs.DeviceClasses().Create(ctx, c, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Equal(t, c.Spec.ExtendedResourceName, got.Spec.ExtendedResourceName, "the API server dropped extendedResourceName: is DRAExtendedResource on?")
	}
	_, err = rs.ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dra-node-1-fpgas"},
		Spec: resourcev1.ResourceSliceSpec{Driver: "fpga.example.com", Pool: resourcev1.ResourcePool{Name: "dra-node-1", Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr("dra-node-1"), Devices: []resourcev1.Device{{Name: "fpga-0"}, {Name: "fpga-1"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The manager's --dra-config is the guide's two mappings, whole GPUs by
	// count and GPU memory by counter; a copy, as a subtest rewrites it.
	managerConfig, err := os.ReadFile("../../config/samples/dra-config.yaml")
	require.NoError(t, err)
	draConfig := filepath.Join(t.TempDir(), "dra.yaml")
	require.NoError(t, os.WriteFile(draConfig, managerConfig, 0o600))
	m := testutil.StartManager(t, cluster, cluster.ManagerBin, "dra",
		"--enrolled-namespaces="+teamNS, "--webhook=false", "--capacity-report-interval=3s",
		"--capacity-hysteresis-percent=30", "--dra-config="+draConfig, "--dra-config-poll-interval=1s", "-v=2")

	// Kueue's own configuration lives in its ConfigMap: the manager reads it
	// and reports mappings that differ from its own, which would check
	// budgets against capacity Kueue does not charge.
	t.Run("DRA mappings that differ from Kueue's ConfigMap are reported", func(t *testing.T) {
		cms := cluster.Kube.CoreV1().ConfigMaps("kueue-system")
		kueueFile := func(mappings string) map[string]string {
			return map[string]string{"controller_manager_config.yaml": "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n" +
				"  " + strings.ReplaceAll(strings.TrimSpace(mappings), "\n", "\n  ") + "\n"}
		}
		onlyGPUs := "deviceClassMappings:\n- name: nvidia.com/gpu\n  deviceClassNames: [gpu.nvidia.com]\n"
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kueue-manager-config"}, Data: kueueFile(onlyGPUs)}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cms.Delete(context.Background(), "kueue-manager-config", metav1.DeleteOptions{}) })
		differ := func(want float64) func() string {
			return func() string {
				v, err := m.Metric(ctx, "ome_quota_dra_mappings_differ", `config="kueue-system/kueue-manager-config"`)
				if err != nil || v != want {
					return fmt.Sprintf("ome_quota_dra_mappings_differ = %v (%v), want %v", v, err, want)
				}
				return ""
			}
		}
		testutil.Eventually(t, 30*time.Second, differ(1))
		testutil.Eventually(t, 30*time.Second, func() string {
			out := testutil.Kubectl(t, cluster, "get", "events", "-A", "--field-selector", "reason=DRAMappingsDiffer,involvedObject.name=root", "-o", "jsonpath={.items[*].message}")
			if !strings.Contains(out, "gpu.memory is the quota manager's only") {
				return fmt.Sprintf("no DRAMappingsDiffer Event on root naming gpu.memory: %q", out)
			}
			return ""
		})
		_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kueue-manager-config"}, Data: kueueFile(string(managerConfig))}, metav1.UpdateOptions{})
		require.NoError(t, err)
		testutil.Eventually(t, 30*time.Second, differ(0))
	})

	t.Run("root shows the DRA pairs like the Node pairs", func(t *testing.T) {
		// 4 nodes x 8 whole GPUs; 4 x 8 counter sets of 40Gi, each counted
		// once although two partitions consume it too.
		testutil.KubectlEquals(t, cluster, 30*time.Second,
			"example.com/gpu a100-40 32 32\ngoogle.com/tpu a100-40 0 0\ngpu.memory a100-40 1280Gi 1280Gi\nnvidia.com/gpu a100-40 32 32",
			"get", "aq", "root", "-o", capPath)
	})

	t.Run("devices of an unmapped class are unbudgeted", func(t *testing.T) {
		testutil.KubectlEquals(t, cluster, 30*time.Second, "fpga.example.com 2",
			"get", "aq", "root", "-o", `jsonpath={range .status.unbudgeted[*]}{.deviceClassName}{" "}{.devices}{"\n"}{end}`)
		testutil.Eventually(t, 10*time.Second, func() string {
			v, err := m.Metric(ctx, "ome_quota_dra_unbudgeted_devices", `deviceclass="fpga.example.com"`)
			if err != nil || v != 2 {
				return fmt.Sprintf("ome_quota_dra_unbudgeted_devices = %v (%v), want 2", v, err)
			}
			return ""
		})
	})

	applyYAML(t, `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata: {name: dra-ml}
spec:
  role: Cohort
  parentRef: {name: root}
  budgets:
  - {resourceName: nvidia.com/gpu, resourceFlavor: a100-40, nominal: "16"}
  - {resourceName: gpu.memory, resourceFlavor: a100-40, nominal: 640Gi}
  - {resourceName: example.com/gpu, resourceFlavor: a100-40, nominal: "4"}
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata: {name: dra-team}
spec:
  role: ClusterQueue
  parentRef: {name: dra-ml}
  budgets:
  - {resourceName: nvidia.com/gpu, resourceFlavor: a100-40, nominal: "2"}
  - {resourceName: gpu.memory, resourceFlavor: a100-40, nominal: 80Gi}
  - {resourceName: example.com/gpu, resourceFlavor: a100-40, nominal: "1"}
`)
	testutil.Eventually(t, 30*time.Second, func() string {
		if r := readyReason(t, "dra-team"); r != "True Admitted" {
			return "dra-team: " + r
		}
		if _, err := cluster.Kueue.KueueV1beta2().LocalQueues(teamNS).Get(ctx, "dra-team", metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})

	t.Run("a gpu.memory budget above the mark is CapacityExceeded and frozen", func(t *testing.T) {
		cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "dra-team", metav1.GetOptions{})
		require.NoError(t, err)
		testutil.Kubectl(t, cluster, "patch", "aq", "dra-ml", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/1/nominal","value":"2000Gi"}]`)
		testutil.Eventually(t, 30*time.Second, func() string {
			if r := readyReason(t, "dra-ml"); r != "False CapacityExceeded" {
				return "dra-ml: " + r
			}
			if r := readyReason(t, "dra-team"); r != "False Frozen" {
				return "dra-team: " + r
			}
			return ""
		})
		aq, err := cluster.AQs.Get(ctx, "dra-ml", metav1.GetOptions{})
		require.NoError(t, err)
		require.Contains(t, aq.Status.Conditions[0].Message+aq.Status.Conditions[1].Message, "budget gpu.memory on a100-40 is 2000Gi but the high-water mark on root is 1280Gi")
		// A change to the frozen team reaches the manager (an event is
		// applied) and leaves its ClusterQueue as it was.
		events0, err := m.Metric(ctx, "ome_quota_events_total", `kind="AcceleratorQuota"`)
		require.NoError(t, err)
		testutil.Kubectl(t, cluster, "patch", "aq", "dra-team", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"3"}]`)
		testutil.Eventually(t, 10*time.Second, func() string {
			if n, err := m.Metric(ctx, "ome_quota_events_total", `kind="AcceleratorQuota"`); err != nil || n <= events0 {
				return fmt.Sprintf("no AcceleratorQuota event applied yet (%v)", err)
			}
			return ""
		})
		// The manager has passed over the changed team: its status names
		// the new generation.
		testutil.Eventually(t, 10*time.Second, func() string {
			team, err := cluster.AQs.Get(ctx, "dra-team", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if team.Status.ObservedGeneration != team.Generation {
				return fmt.Sprintf("dra-team's status is at generation %d of %d", team.Status.ObservedGeneration, team.Generation)
			}
			return ""
		})
		now, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "dra-team", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, cq.Generation, now.Generation, "a frozen team's ClusterQueue is left as it was")
		testutil.Kubectl(t, cluster, "patch", "aq", "dra-team", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"2"}]`)
		testutil.Kubectl(t, cluster, "patch", "aq", "dra-ml", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/1/nominal","value":"640Gi"}]`)
		testutil.Eventually(t, 30*time.Second, func() string {
			if r := readyReason(t, "dra-team"); r != "True Admitted" {
				return "dra-team: " + r
			}
			return ""
		})
	})

	t.Run("Kueue admits ResourceClaimTemplate workloads within the team's budget", func(t *testing.T) {
		_, err := rs.ResourceClaimTemplates(teamNS).Create(ctx, &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}}}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		for i := range 3 {
			createJob(t, fmt.Sprintf("rct-%d", i), func(ps *corev1.PodSpec) {
				ps.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("one-gpu")}}
				ps.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
			})
		}
		waitAdmission(t, "rct-", 2, "nvidia.com/gpu")
	})

	t.Run("an extended resource of a mapped class is charged to the mapping's name", func(t *testing.T) {
		// The team's 2 nvidia.com/gpu are used by the claims above: a
		// request for example.com/gpu-dp, backed by gpu.nvidia.com, waits
		// for nvidia.com/gpu quota.
		createJob(t, "dp-0", func(ps *corev1.PodSpec) {
			one := resource.MustParse("1")
			ps.Containers[0].Resources.Requests = corev1.ResourceList{"example.com/gpu-dp": one}
			ps.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/gpu-dp": one}
		})
		waitAdmission(t, "dp-", 0, "nvidia.com/gpu")
	})

	t.Run("Kueue admits extended-resource workloads within the team's budget", func(t *testing.T) {
		for i := range 2 {
			createJob(t, fmt.Sprintf("ext-%d", i), func(ps *corev1.PodSpec) {
				one := resource.MustParse("1")
				ps.Containers[0].Resources.Requests = corev1.ResourceList{"example.com/gpu": one}
				ps.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/gpu": one}
			})
		}
		waitAdmission(t, "ext-", 1, "example.com/gpu")
	})

	t.Run("Kueue v0.17 refuses the guide's MIG claim: CEL selectors in a claim", func(t *testing.T) {
		// The partitionable-device path: a claim that picks a partition
		// profile with a CEL selector. Kueue v0.17 (pkg/dra/claims.go)
		// refuses it, and has no counter sources to charge gpu.memory.
		_, err := rs.ResourceClaimTemplates(teamNS).Create(ctx, &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "gpu-partition"},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com",
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}}}}}}}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		createJob(t, "mig-0", func(ps *corev1.PodSpec) {
			ps.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("gpu-partition")}}
			ps.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		})
		testutil.Eventually(t, 30*time.Second, func() string {
			wls, err := cluster.Kueue.KueueV1beta2().Workloads(teamNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			for _, w := range wls.Items {
				if len(w.OwnerReferences) == 0 || w.OwnerReferences[0].Name != "mig-0" {
					continue
				}
				for _, c := range w.Status.Conditions {
					if c.Type == kueuev1beta2.WorkloadQuotaReserved && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "CEL selectors are not supported") {
						return ""
					}
				}
				return fmt.Sprintf("workload %s conditions: %+v", w.Name, w.Status.Conditions)
			}
			return "no workload for mig-0 yet"
		})
	})

	t.Run("deleting one node's slices lowers the mark only past the band", func(t *testing.T) {
		deleteSlices := func(node string) {
			for _, sl := range nodeSlices(node) {
				require.NoError(t, rs.ResourceSlices().Delete(ctx, sl.Name, metav1.DeleteOptions{}))
			}
		}
		// 25% of the GPUs go: inside the 30% band, the marks stay.
		deleteSlices("dra-node-4")
		testutil.KubectlEquals(t, cluster, 30*time.Second,
			"example.com/gpu a100-40 24 32\ngoogle.com/tpu a100-40 0 0\ngpu.memory a100-40 960Gi 1280Gi\nnvidia.com/gpu a100-40 24 32",
			"get", "aq", "root", "-o", capPath)
		// 50%: past the band, the marks fall to what is installed.
		deleteSlices("dra-node-3")
		testutil.KubectlEquals(t, cluster, 30*time.Second,
			"example.com/gpu a100-40 16 16\ngoogle.com/tpu a100-40 0 0\ngpu.memory a100-40 640Gi 640Gi\nnvidia.com/gpu a100-40 16 16",
			"get", "aq", "root", "-o", capPath)
	})

	t.Run("a configuration change is an event: the manager reads Kueue's own file", func(t *testing.T) {
		data, err := os.ReadFile(cluster.KueueConfigPath)
		require.NoError(t, err)
		ms, err := manager.ParseDRAConfig(data)
		require.NoError(t, err)
		require.Empty(t, cmp.Diff([]events.DeviceClassMapping{{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com"}}}, ms))
		before, err := m.Metric(ctx, "ome_quota_events_total", `kind="Config"`)
		require.NoError(t, err)
		// The manager's file becomes Kueue's: gpu.memory is no longer
		// mapped, so it is no longer measured and keeps its mark at
		// allocatable 0.
		require.NoError(t, os.WriteFile(draConfig, data, 0o600))
		testutil.KubectlEquals(t, cluster, 30*time.Second,
			"example.com/gpu a100-40 16 16\ngoogle.com/tpu a100-40 0 0\ngpu.memory a100-40 0 640Gi\nnvidia.com/gpu a100-40 16 16",
			"get", "aq", "root", "-o", capPath)
		after, err := m.Metric(ctx, "ome_quota_events_total", `kind="Config"`)
		require.NoError(t, err)
		require.Equal(t, before+1, after, "one Config event for one change of the file")
		// The MIG class is no longer mapped either: its partitions are
		// unbudgeted now.
		testutil.KubectlEquals(t, cluster, 30*time.Second, "fpga.example.com 2\nmig.nvidia.com 32",
			"get", "aq", "root", "-o", `jsonpath={range .status.unbudgeted[*]}{.deviceClassName}{" "}{.devices}{"\n"}{end}`)
	})
}

// createJob creates a suspended Job in the team's namespace, queued to the
// team's LocalQueue, retrying until Kueue's webhooks answer.
func createJob(t *testing.T, name string, edit func(*corev1.PodSpec)) {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamNS, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "dra-team"}},
		Spec: batchv1.JobSpec{Suspend: ptr(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "worker", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Args: []string{"pause"},
				Resources: corev1.ResourceRequirements{}}},
		}}},
	}
	edit(&job.Spec.Template.Spec)
	testutil.Eventually(t, 30*time.Second, func() string {
		_, err := cluster.Kube.BatchV1().Jobs(teamNS).Create(context.Background(), job, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err.Error()
		}
		return ""
	})
}

// waitAdmission waits until exactly admitted of the Jobs named prefix* are
// admitted, each charged 1 of res, and the others wait for quota.
func waitAdmission(t *testing.T, prefix string, admitted int, res corev1.ResourceName) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, func() string {
		wls, err := cluster.Kueue.KueueV1beta2().Workloads(teamNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		var in, pending []string
		var report []string
		for _, w := range wls.Items {
			if len(w.OwnerReferences) == 0 || !strings.HasPrefix(w.OwnerReferences[0].Name, prefix) {
				continue
			}
			var msg string
			ok := false
			for _, c := range w.Status.Conditions {
				if c.Type == kueuev1beta2.WorkloadAdmitted && c.Status == metav1.ConditionTrue {
					ok = true
				}
				if c.Type == kueuev1beta2.WorkloadQuotaReserved && c.Status == metav1.ConditionFalse {
					msg = c.Message
				}
			}
			if ok {
				u := w.Status.Admission.PodSetAssignments[0].ResourceUsage[res]
				if u.Cmp(resource.MustParse("1")) != 0 {
					return fmt.Sprintf("%s admitted with %s=%s, want 1", w.Name, res, u.String())
				}
				in = append(in, w.Name)
			} else if strings.Contains(msg, "insufficient") && strings.Contains(msg, string(res)) {
				pending = append(pending, w.Name)
			}
			report = append(report, fmt.Sprintf("%s admitted=%t %q", w.Name, ok, msg))
		}
		if len(in) != admitted || len(report) != len(in)+len(pending) || len(pending) == 0 {
			return fmt.Sprintf("want %d admitted and the rest pending for %s quota; workloads:\n%s", admitted, res, strings.Join(report, "\n"))
		}
		return ""
	})
}

// TestDRAForbidden: a manager that may not list DRA objects stops at once
// and says which rights to grant, instead of waiting for caches that never
// sync.
func TestDRAForbidden(t *testing.T) {
	ctx := context.Background()
	const user = "ome-dra-forbidden"
	_, err := cluster.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "ome.io", "kueue.x-k8s.io", "coordination.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cluster.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The admin's kubeconfig, impersonating the user.
	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	require.NoError(t, err)
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, kubeconfig))

	m := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "dra-forbidden", "--kubeconfig="+kubeconfig, "--webhook=false", "--leader-elect=false")
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		m.Kill()
		t.Fatalf("the manager did not stop:\n%s", m.Tail(20))
	}
	require.Equal(t, 1, m.ExitCode())
	require.Contains(t, m.Tail(5), "grant the manager list and watch on deviceclasses and resourceslices in resource.k8s.io, or run with --dra=false")
}
