package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const planTree = `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: dra-plan-group
spec:
  role: Cohort
  parentRef:
    name: root
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: dra-plan
      nominal: "8"
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: dra-plan-team
spec:
  role: ClusterQueue
  parentRef:
    name: dra-plan-group
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: dra-plan
      nominal: "%s"
`

// TestPlanCountsDRAClaims: Workloads charged through a DRA device class
// count like Jobs asking for the extended resource. Three Jobs each claim
// one device of gpu.nvidia.com, which Kueue charges as nvidia.com/gpu;
// lowering their team from 4 to 1 leaves 2 above its budget, and the plan
// names the two most recently admitted, each with nvidia.com/gpu 1.
func TestPlanCountsDRAClaims(t *testing.T) {
	ctx := context.Background()
	rs := cluster.Kube.ResourceV1()
	kq := cluster.Kueue.KueueV1beta2()
	planLabels := map[string]string{"pool": "dra-plan"}
	_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.FakeNode{Name: "dra-plan-node", Labels: planLabels,
		Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}})
	require.NoError(t, err)
	_, err = kq.ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "dra-plan"},
		Spec: kueuev1beta2.ResourceFlavorSpec{NodeLabels: planLabels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	if _, err := rs.DeviceClasses().Create(ctx, deviceClass("gpu.nvidia.com", gpuClass, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = rs.ResourceClaimTemplates(teamNS).Create(ctx, &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "plan-one-gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}}}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	testutil.StartManager(t, cluster, cluster.ManagerBin, "dra-plan", "--enrolled-namespaces="+teamNS, "--webhook=false", "--leader-elect=false")
	applyYAML(t, fmt.Sprintf(planTree, "4"))
	testutil.Eventually(t, 60*time.Second, func() string {
		if r := readyReason(t, "dra-plan-team"); r != "True Admitted" {
			return "dra-plan-team: " + r
		}
		if _, err := kq.LocalQueues(teamNS).Get(ctx, "dra-plan-team", metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})

	// Three Jobs, admitted one after another, each in a second of its own.
	var admittedAt []time.Time
	for i := range 3 {
		testutil.NextSecond(t)
		name := fmt.Sprintf("plan-claim-%d", i)
		claimJob(t, name, "dra-plan-team", "plan-one-gpu")
		var at time.Time
		testutil.Eventually(t, 60*time.Second, func() string {
			w := workloadOf(t, name)
			if w == nil || w.Status.Admission == nil {
				return name + " is not admitted"
			}
			u := w.Status.Admission.PodSetAssignments[0].ResourceUsage["nvidia.com/gpu"]
			if u.Value() != 1 || w.Status.Admission.PodSetAssignments[0].Flavors["nvidia.com/gpu"] != "dra-plan" {
				return fmt.Sprintf("%s is admitted with %v", name, w.Status.Admission.PodSetAssignments[0])
			}
			at = meta.FindStatusCondition(w.Status.Conditions, kueuev1beta2.WorkloadQuotaReserved).LastTransitionTime.Time
			return ""
		})
		admittedAt = append(admittedAt, at)
	}
	require.True(t, slices.IsSortedFunc(admittedAt, func(a, b time.Time) int { return a.Compare(b) }))
	testutil.Eventually(t, 60*time.Second, func() string {
		cq, err := kq.ClusterQueues().Get(ctx, "dra-plan-team", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, f := range cq.Status.FlavorsUsage {
			for _, r := range f.Resources {
				if r.Name == "nvidia.com/gpu" && r.Total.Value() == 3 {
					return ""
				}
			}
		}
		return fmt.Sprintf("dra-plan-team's ClusterQueue reports %+v", cq.Status.FlavorsUsage)
	})

	file := filepath.Join(t.TempDir(), "lower.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(planTree, "1")), 0o600))
	code, rep := testutil.Plan(t, cluster, "-f", file)
	require.Equal(t, 3, code)
	require.Len(t, rep.Impact.AboveBudget, 1, "%+v", rep.Impact)
	ex := rep.Impact.AboveBudget[0]
	require.Equal(t, []string{"dra-plan-team", "3", "1", "2"}, []string{ex.Team, ex.Admitted, ex.Budget, ex.Above})
	var named []string
	for _, w := range ex.Workloads {
		require.Equal(t, "nvidia.com/gpu@dra-plan=1", w.Usage)
		named = append(named, w.Name)
	}
	want := []string{workloadOf(t, "plan-claim-2").Name, workloadOf(t, "plan-claim-1").Name}
	require.Equal(t, want, named, "the newest first, as Kueue would preempt them")
}

// workloadOf is Kueue's Workload of the Job named job, or nil.
func workloadOf(t *testing.T, job string) *kueuev1beta2.Workload {
	t.Helper()
	wls, err := cluster.Kueue.KueueV1beta2().Workloads(teamNS).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for i := range wls.Items {
		for _, o := range wls.Items[i].OwnerReferences {
			if o.Kind == "Job" && o.Name == job {
				return &wls.Items[i]
			}
		}
	}
	return nil
}

// claimJob creates a suspended Job charged to queue whose one pod claims
// a device through the ResourceClaimTemplate rct.
func claimJob(t *testing.T, name, queue, rct string) {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamNS, Labels: map[string]string{"kueue.x-k8s.io/queue-name": queue}},
		Spec: batchv1.JobSpec{Suspend: ptr(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr(rct)}},
			Containers: []corev1.Container{{Name: "server", Image: "registry.invalid/server:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		}}},
	}
	testutil.Eventually(t, 30*time.Second, func() string {
		if _, err := cluster.Kube.BatchV1().Jobs(teamNS).Create(context.Background(), job, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err.Error()
		}
		return ""
	})
}
