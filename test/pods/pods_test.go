package pods

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/testutil"
)

// kueueGate is the scheduling gate Kueue's pod webhook puts on a Pod that
// names a queue, and removes once its Workload is admitted.
const kueueGate = "kueue.x-k8s.io/admission"

const ns = "ml-serving"

// gpuPod is a Pod of one container asking for one GPU, charged to queue.
func gpuPod(name, queue string) *corev1.Pod {
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": queue}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "server", Image: "registry.invalid/model-server:1",
			Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
		}}},
	}
}

func gated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == kueueGate {
			return true
		}
	}
	return false
}

// createPods creates n Pods named prefix-NN for queue; Kueue's webhook
// gates each one as it is created.
func createPods(t *testing.T, prefix, queue string, n int) {
	t.Helper()
	for i := range n {
		p, err := cluster.Kube.CoreV1().Pods(ns).Create(context.Background(), gpuPod(fmt.Sprintf("%s-%02d", prefix, i), queue), metav1.CreateOptions{})
		require.NoError(t, err)
		require.True(t, gated(p), "Kueue did not gate %s at creation: %+v", p.Name, p.Spec.SchedulingGates)
	}
}

// admitted waits until Kueue has looked at every Pod of prefix: want of
// them ungated, and the Workload of each other one pending for want of
// quota. It returns the ungated count then.
func admitted(t *testing.T, prefix string, want int) {
	t.Helper()
	ctx := context.Background()
	testutil.Eventually(t, 60*time.Second, func() string {
		pods, err := cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		open, total := 0, 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, prefix+"-") {
				total++
				if !gated(&p) {
					open++
				}
			}
		}
		wls, err := cluster.Kueue.KueueV1beta2().Workloads(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		pending := 0
		for _, w := range wls.Items {
			if !strings.Contains(w.Name, prefix+"-") {
				continue
			}
			for _, c := range w.Status.Conditions {
				if c.Type == kueuev1beta2.WorkloadQuotaReserved && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "insufficient unused quota for nvidia.com/gpu in flavor a100") {
					pending++
				}
			}
		}
		if open != want || pending != total-want {
			return fmt.Sprintf("%s: %d of %d Pods ungated, %d Workloads pending for quota; want %d ungated, the rest pending", prefix, open, total, pending, want)
		}
		return ""
	})
}

// budget waits until the first budget of node reports admitted and
// borrowed.
func budget(t *testing.T, node, admitted, borrowed string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() string {
		aq, err := cluster.AQs.Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if len(aq.Status.Budgets) != 1 {
			return fmt.Sprintf("%s budgets: %+v", node, aq.Status.Budgets)
		}
		b := aq.Status.Budgets[0]
		if b.Admitted.String() != admitted || b.Borrowed.String() != borrowed {
			return fmt.Sprintf("%s: admitted %s, borrowed %s; want %s, %s", node, b.Admitted.String(), b.Borrowed.String(), admitted, borrowed)
		}
		return ""
	})
}

// finishPods ends the Pods of prefix as a kubelet would when their
// servers exit (phase Succeeded: there is no kubelet here), waits until
// Kueue has finished their Workloads and team's budget shows nothing
// admitted, then deletes them and waits until they are gone (Kueue drops
// its finalizer from each).
func finishPods(t *testing.T, prefix, team string) {
	t.Helper()
	ctx := context.Background()
	pods, err := cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, prefix+"-") {
			p.Status.Phase = corev1.PodSucceeded
			_, err := cluster.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
			require.NoError(t, err)
			names = append(names, p.Name)
		}
	}
	budget(t, team, "0", "0")
	for _, n := range names {
		if err := cluster.Kube.CoreV1().Pods(ns).Delete(ctx, n, *metav1.NewDeleteOptions(0)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 60*time.Second, func() string {
		pods, err := cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, prefix+"-") {
				return fmt.Sprintf("%s is still there (finalizers %v)", p.Name, p.Finalizers)
			}
		}
		return ""
	})
}

// TestPodsThroughKueue follows the guide's serving path: Pods labelled
// kueue.x-k8s.io/queue-name wait behind Kueue's scheduling gate until the
// team's ClusterQueue, which the manager wrote, admits them.
func TestPodsThroughKueue(t *testing.T) {
	ctx := context.Background()
	testutil.GuideCluster(t, cluster)
	testutil.StartManager(t, cluster, cluster.ManagerBin, "m",
		"--enrolled-namespaces="+ns, "--capacity-report-interval=3s", "--webhook=false", "--leader-elect=false")
	testutil.Kubectl(t, cluster, "apply", "-f", "../../config/samples/quota-tree.yaml")
	testutil.WaitMaterialized(t, cluster, "ml-research", "team-alpha", "team-beta")

	t.Run("team-beta's Pods: admitted up to nominal plus borrowing, the rest gated", func(t *testing.T) {
		// team-beta: nominal 8, borrowingLimit 4; team-alpha (16) is idle.
		createPods(t, "beta", "team-beta", 13)
		admitted(t, "beta", 12)
		budget(t, "team-beta", "12", "4")
		testutil.Eventually(t, 30*time.Second, func() string {
			out := testutil.Kubectl(t, cluster, "get", "aq", "team-beta", "-o", "custom-columns=NOMINAL:.status.summary.nominal,ADMITTED:.status.summary.admitted")
			if strings.Join(strings.Fields(out), " ") != "NOMINAL ADMITTED 8 12" {
				return "kubectl get aq team-beta printed:\n" + out
			}
			return ""
		})
		finishPods(t, "beta", "team-beta")
	})

	t.Run("borrowing from a sibling Cohort's idle quota through root", func(t *testing.T) {
		// ml-platform (8) sits beside ml-research (24) under root; its team
		// team-gamma (nominal 4, borrowingLimit 8) borrows what
		// ml-research's idle teams lend, through the Kueue Cohort root.
		_, err := cluster.AQs.Create(ctx, aqtest.Cohort("ml-platform", v1beta1.RootName).Budget("nvidia.com/gpu", "a100", "8").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cluster.AQs.Create(ctx, aqtest.Team("team-gamma", "ml-platform").Budget("nvidia.com/gpu", "a100", "4").Borrow("8").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		testutil.WaitMaterialized(t, cluster, "ml-platform", "team-gamma")
		cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "team-gamma", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, kueuev1beta2.CohortReference("ml-platform"), cq.Spec.CohortName)

		createPods(t, "gamma", "team-gamma", 13)
		admitted(t, "gamma", 12)
		budget(t, "team-gamma", "12", "8")
		// Nothing of ml-research is in use: the 8 borrowed GPUs are its
		// teams' idle nominal, lent across the two Cohorts.
		budget(t, "team-alpha", "0", "0")
		budget(t, "team-beta", "0", "0")
		finishPods(t, "gamma", "team-gamma")
	})
}
