package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
)

// TestPoolScaledToZeroKeepsItsMark follows the guide: a pair whose last
// Node is gone keeps its last mark at 0 allocatable, through a restart of
// the quota manager and through the hysteresis-0 upgrade, which restarts it
// with the damping off.
func TestPoolScaledToZeroKeepsItsMark(t *testing.T) {
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	labels := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
	_, err := kq.ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: "h100"}, Spec: kueuev1beta2.ResourceFlavorSpec{NodeLabels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// Registered before the managers, so it runs after they stop: the
	// pool's entries stay on root by design, and the other tests expect a
	// root without them.
	t.Cleanup(func() {
		_ = cluster.Kube.CoreV1().Nodes().Delete(ctx, "h100-node-1", metav1.DeleteOptions{})
		_ = kq.ResourceFlavors().Delete(ctx, "h100", metav1.DeleteOptions{})
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			root, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			kept := root.Status.Capacity[:0]
			for _, c := range root.Status.Capacity {
				if c.ResourceFlavor != "h100" {
					kept = append(kept, c)
				}
			}
			root.Status.Capacity = kept
			_, err = aqs.UpdateStatus(ctx, root, metav1.UpdateOptions{})
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing h100 from root's status: %v", err)
		}
	})
	node := localcluster.FakeNode{Name: "h100-node-1", Labels: labels, Capacity: localcluster.GPUNode("x", 8).Capacity}

	// h100Line is the guide's capacity listing of root, the h100 GPU line.
	h100Line := func() string {
		text, err := cluster.Kubectl(context.Background(), "get", "aq", "root", "-o", capacityJSONPath)
		if err != nil {
			return err.Error() // root is the leader's to create: the caller waits
		}
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "nvidia.com/gpu h100 ") {
				return l
			}
		}
		return "no h100 line"
	}
	waitLine := func(want string) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			if got := h100Line(); got != want {
				return fmt.Sprintf("root lists %q, want %q", got, want)
			}
			return ""
		})
	}

	m1 := startManager(t, "pool-1")
	_, err = localcluster.ApplyNode(ctx, cluster.Kube, node)
	require.NoError(t, err)
	waitLine("nvidia.com/gpu h100 8 8")
	require.NoError(t, cluster.Kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}))
	waitLine("nvidia.com/gpu h100 0 8")

	for _, restart := range []struct {
		name string
		args []string
	}{
		{"a restart", nil},
		{"the hysteresis-0 upgrade", []string{"--capacity-hysteresis-percent=0"}},
	} {
		m1.Stop()
		started := metav1.Now().Rfc3339Copy()
		m1 = startManager(t, "pool-"+strings.ReplaceAll(restart.name, " ", "-"), restart.args...)
		// The new manager has measured once its stamp on the pair is a
		// second later than its start (stamps are whole seconds, the report
		// interval 3 s): the mark is still 8.
		eventually(t, 30*time.Second, func() string {
			root, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			for _, c := range root.Status.Capacity {
				if c.ResourceName == "nvidia.com/gpu" && c.ResourceFlavor == "h100" {
					if !c.ObservedAt.After(started.Time) {
						return fmt.Sprintf("after %s: not measured yet (observedAt %s)", restart.name, c.ObservedAt)
					}
					if c.HighWaterMark.String() != "8" || c.Allocatable.String() != "0" {
						return fmt.Sprintf("after %s: allocatable %s, mark %s; want 0 and 8", restart.name, &c.Allocatable, &c.HighWaterMark)
					}
					return ""
				}
			}
			return fmt.Sprintf("after %s: root has no h100 entry", restart.name)
		})
		require.Equal(t, "nvidia.com/gpu h100 0 8", h100Line(), "after %s", restart.name)
	}
}
