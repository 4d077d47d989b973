package pods

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const podsPlanTree = `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: pods-plan-group
spec:
  role: Cohort
  parentRef:
    name: root
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: pods-plan
      nominal: "8"
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: pods-plan-team
spec:
  role: ClusterQueue
  parentRef:
    name: pods-plan-group
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: pods-plan
      nominal: "%s"
`

// TestPlanCountsPods: Pods that Kueue's pod integration admits one by one
// count like Jobs. Five serving Pods of one GPU run on a team of 6;
// lowering it to 2 leaves 3 above its budget, and the plan names the
// three most recently admitted Pods' Workloads, each with 1 GPU.
func TestPlanCountsPods(t *testing.T) {
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	labels := map[string]string{"pool": "pods-plan"}
	_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.FakeNode{Name: "pods-plan-node", Labels: labels,
		Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}})
	require.NoError(t, err)
	_, err = kq.ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "pods-plan"},
		Spec: kueuev1beta2.ResourceFlavorSpec{NodeLabels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	testutil.StartManager(t, cluster, cluster.ManagerBin, "pods-plan", "--enrolled-namespaces="+ns, "--webhook=false", "--leader-elect=false")
	tree := filepath.Join(t.TempDir(), "tree.yaml")
	require.NoError(t, os.WriteFile(tree, []byte(fmt.Sprintf(podsPlanTree, "6")), 0o600))
	testutil.Kubectl(t, cluster, "apply", "-f", tree)
	testutil.WaitMaterialized(t, cluster, "pods-plan-group", "pods-plan-team")

	// Five Pods, each admitted in a second of its own.
	for i := range 5 {
		testutil.NextSecond(t)
		gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plan-pod-%d", i), Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "pods-plan-team"}},
			Spec: corev1.PodSpec{NodeSelector: labels, Containers: []corev1.Container{{Name: "server", Image: "registry.invalid/model-server:1",
				Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu}}}},
		}
		_, err := cluster.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		admitted(t, "plan-pod", i+1)
	}
	budget(t, "pods-plan-team", "5", "0")

	file := filepath.Join(t.TempDir(), "lower.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(podsPlanTree, "2")), 0o600))
	code, rep := testutil.Plan(t, cluster, "-f", file)
	require.Equal(t, 3, code)
	require.Len(t, rep.Impact.AboveBudget, 1, "%+v", rep.Impact)
	ex := rep.Impact.AboveBudget[0]
	require.Equal(t, []string{"pods-plan-team", "5", "2", "3"}, []string{ex.Team, ex.Admitted, ex.Budget, ex.Above})
	owners := map[string]string{}
	wls, err := kq.Workloads(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, w := range wls.Items {
		for _, o := range w.OwnerReferences {
			if o.Kind == "Pod" {
				owners[w.Name] = o.Name
			}
		}
	}
	var named []string
	for _, w := range ex.Workloads {
		require.Equal(t, "nvidia.com/gpu@pods-plan=1", w.Usage)
		named = append(named, owners[w.Name])
	}
	require.Equal(t, []string{"plan-pod-4", "plan-pod-3", "plan-pod-2"}, named, "the newest first, as Kueue would preempt them")
	finishPods(t, "plan-pod", "pods-plan-team")
}
