package kueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// handCQ is a ClusterQueue written by hand, as the manager will write them.
func handCQ(name, cohort string, nominal int64, borrowing *int64) *kueuev1beta2.ClusterQueue {
	rq := kueuev1beta2.ResourceQuota{Name: "nvidia.com/gpu", NominalQuota: *resource.NewQuantity(nominal, resource.DecimalSI)}
	if borrowing != nil {
		rq.BorrowingLimit = resource.NewQuantity(*borrowing, resource.DecimalSI)
	}
	return &kueuev1beta2.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kueuev1beta2.ClusterQueueSpec{
			CohortName:        kueuev1beta2.CohortReference(cohort),
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueuev1beta2.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{"nvidia.com/gpu"},
				Flavors:          []kueuev1beta2.FlavorQuotas{{Name: "a100", Resources: []kueuev1beta2.ResourceQuota{rq}}},
			}},
		},
	}
}

func gpuWorkload(ns, name, queue string, gpus int64) *kueuev1beta2.Workload {
	return &kueuev1beta2.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kueuev1beta2.WorkloadSpec{
			QueueName: kueuev1beta2.LocalQueueName(queue),
			PodSets: []kueuev1beta2.PodSet{{
				Name:  "main",
				Count: 1,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "worker", Image: "registry.invalid/pause",
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
							Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
						},
					}},
				}},
			}},
		},
	}
}

// retry retries a create until Kueue's webhooks answer it.
func retry(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() string {
		if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Sprintf("%s: %v", what, err)
		}
		return ""
	})
}

func admitted(w *kueuev1beta2.Workload) bool {
	for _, c := range w.Status.Conditions {
		if c.Type == kueuev1beta2.WorkloadAdmitted && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestKueueAdmitsAgainstHandWrittenQueues checks, before the manager exists,
// that real Kueue enforces the guide's budgets the way the manager will
// write them: team-beta (8, borrowing up to 4) in cohort ml-research beside
// an idle team-alpha (16) gets 12 GPUs admitted, and a 13th waits.
func TestKueueAdmitsAgainstHandWrittenQueues(t *testing.T) {
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	const ns = "hand-queues"
	require.NoError(t, cluster.EnsureNamespace(ctx, ns))
	for i := 1; i <= 4; i++ {
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.GPUNode(fmt.Sprintf("hand-node-%d", i), 8))
		require.NoError(t, err)
	}
	retry(ctx, t, "ResourceFlavor a100", func() error {
		_, err := kq.ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{})
		return err
	})
	retry(ctx, t, "Cohort", func() error {
		_, err := kq.Cohorts().Create(ctx, &kueuev1beta2.Cohort{ObjectMeta: metav1.ObjectMeta{Name: "hand-ml-research"}}, metav1.CreateOptions{})
		return err
	})
	for _, cq := range []*kueuev1beta2.ClusterQueue{
		handCQ("hand-team-alpha", "hand-ml-research", 16, ptr.To[int64](0)),
		handCQ("hand-team-beta", "hand-ml-research", 8, ptr.To[int64](4)),
	} {
		retry(ctx, t, "ClusterQueue "+cq.Name, func() error {
			_, err := kq.ClusterQueues().Create(ctx, cq, metav1.CreateOptions{})
			return err
		})
	}
	localQueue := func(name string) {
		retry(ctx, t, "LocalQueue "+name, func() error {
			_, err := kq.LocalQueues(ns).Create(ctx, &kueuev1beta2.LocalQueue{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(name)},
			}, metav1.CreateOptions{})
			return err
		})
	}
	localQueue("hand-team-beta")

	// Twelve one-GPU workloads first, then the thirteenth, so that which one
	// waits is known.
	for i := 1; i <= 12; i++ {
		w := gpuWorkload(ns, fmt.Sprintf("beta-%02d", i), "hand-team-beta", 1)
		retry(ctx, t, w.Name, func() error { _, err := kq.Workloads(ns).Create(ctx, w, metav1.CreateOptions{}); return err })
	}
	waitAdmitted(ctx, t, ns, 12)
	w13 := gpuWorkload(ns, "beta-13", "hand-team-beta", 1)
	retry(ctx, t, w13.Name, func() error { _, err := kq.Workloads(ns).Create(ctx, w13, metav1.CreateOptions{}); return err })

	// The thirteenth is evaluated and left pending for want of quota.
	var msg string
	require.Eventually(t, func() bool {
		w, err := kq.Workloads(ns).Get(ctx, "beta-13", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range w.Status.Conditions {
			if c.Type == kueuev1beta2.WorkloadQuotaReserved && c.Status == metav1.ConditionFalse && c.Reason == "Pending" {
				msg = c.Message
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "beta-13 never reported Pending")
	require.Contains(t, msg, "insufficient unused quota for nvidia.com/gpu in flavor a100")
	// And it stays that way through a later scheduling pass in the
	// Cohort: a workload of team-alpha is admitted (4 of its 12 GPUs not
	// lent), and beta-13 still waits.
	localQueue("hand-team-alpha")
	alpha := gpuWorkload(ns, "alpha-01", "hand-team-alpha", 4)
	retry(ctx, t, alpha.Name, func() error { _, err := kq.Workloads(ns).Create(ctx, alpha, metav1.CreateOptions{}); return err })
	waitAdmitted(ctx, t, ns, 13)
	w, err := kq.Workloads(ns).Get(ctx, "beta-13", metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, admitted(w), "beta-13 was admitted after the pass that admitted alpha-01")

	// team-beta's ClusterQueue reports 12 GPUs in use, 4 of them borrowed.
	require.Eventually(t, func() bool {
		cq, err := kq.ClusterQueues().Get(ctx, "hand-team-beta", metav1.GetOptions{})
		if err != nil || len(cq.Status.FlavorsUsage) == 0 || len(cq.Status.FlavorsUsage[0].Resources) == 0 {
			return false
		}
		r := cq.Status.FlavorsUsage[0].Resources[0]
		return r.Total.Value() == 12 && r.Borrowed.Value() == 4
	}, 30*time.Second, 200*time.Millisecond, "team-beta's flavorsUsage never showed 12 in use, 4 borrowed")
}

func countAdmitted(ctx context.Context, t *testing.T, ns string) int {
	t.Helper()
	wl, err := cluster.Kueue.KueueV1beta2().Workloads(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	n := 0
	for i := range wl.Items {
		if admitted(&wl.Items[i]) {
			n++
		}
	}
	return n
}

func waitAdmitted(ctx context.Context, t *testing.T, ns string, want int) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, func() string {
		if got := countAdmitted(ctx, t, ns); got != want {
			return fmt.Sprintf("want %d admitted workloads in %s, got %d", want, ns, got)
		}
		return ""
	})
}
