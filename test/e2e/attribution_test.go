package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestOneFlavorPerNode: a label-less flavor (the DRA guide's
// default-flavor) beside a100 matches every Node, but each Node counts
// toward its most specific flavor only, so a100's capacity is not doubled
// onto default-flavor; a cordoned Node's GPUs are installed but
// unavailable (ome_quota_capacity_unavailable).
func TestOneFlavorPerNode(t *testing.T) {
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	node := localcluster.GPUNode("attribution-1", 8)
	_, err := localcluster.ApplyNode(ctx, cluster.Kube, node)
	require.NoError(t, err)
	testutil.A100Flavor(t, cluster)
	t.Cleanup(func() {
		_ = kq.ResourceFlavors().Delete(context.Background(), "default-flavor", metav1.DeleteOptions{})
		_ = cluster.Kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	m := startManager(t, "attribution")

	lines := func() map[string]string {
		out := map[string]string{}
		// Root is the leader's to create: it may not exist right after
		// the start (the caller waits).
		text, err := cluster.Kubectl(ctx, "get", "aq", "root", "-o", capacityJSONPath)
		if err != nil {
			return out
		}
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) == 4 {
				out[f[0]+" "+f[1]] = l
			}
		}
		return out
	}
	var before string
	eventually(t, 30*time.Second, func() string {
		if before = lines()["nvidia.com/gpu a100"]; before == "" {
			return "root lists no a100 GPUs yet"
		}
		return ""
	})

	_, err = kq.ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default-flavor"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// A new flavor shows on root with the next measurement (a tick, 3 s).
	eventually(t, 30*time.Second, func() string {
		got := lines()
		if d := got["nvidia.com/gpu default-flavor"]; d != "nvidia.com/gpu default-flavor 0 0" {
			return fmt.Sprintf("default-flavor: %q, want 0 allocatable and a mark of 0", d)
		}
		if got["nvidia.com/gpu a100"] != before {
			return fmt.Sprintf("a100: %q, want it unchanged: %q", got["nvidia.com/gpu a100"], before)
		}
		return ""
	})

	unavailable := func() float64 {
		v, err := m.Metric(ctx, "ome_quota_capacity_unavailable", `flavor="a100"`, `resource="nvidia.com/gpu"`)
		require.NoError(t, err)
		return v
	}
	base := unavailable()
	node.Cordoned = true
	_, err = localcluster.ApplyNode(ctx, cluster.Kube, node)
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() string {
		if v := unavailable(); v != base+8 {
			return fmt.Sprintf("ome_quota_capacity_unavailable{a100} = %v, want %v", v, base+8)
		}
		return ""
	})
	node.Cordoned = false
	_, err = localcluster.ApplyNode(ctx, cluster.Kube, node)
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() string {
		if v := unavailable(); v != base {
			return fmt.Sprintf("ome_quota_capacity_unavailable{a100} = %v, want %v once uncordoned", v, base)
		}
		return ""
	})
}
