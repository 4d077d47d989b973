package kueue

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestApplyNodeYields: a node's pass whose yield flag is set (an urgent
// change wants the node) stops after the write in flight and says so; the
// next pass writes the rest.
func TestApplyNodeYields(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const team = "yd-team"
	namespaces := []string{"yd-a", "yd-b"}
	for _, ns := range namespaces {
		require.NoError(t, cluster.EnsureNamespace(ctx, ns))
	}
	kq := cluster.Kueue.KueueV1beta2()
	// Kueue's webhook answers once it is up.
	retry(ctx, t, "ResourceFlavor a100", func() error {
		_, err := kq.ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = kq.ClusterQueues().Delete(context.Background(), team, metav1.DeleteOptions{})
		for _, ns := range namespaces {
			_ = kq.LocalQueues(ns).Delete(context.Background(), team, metav1.DeleteOptions{})
		}
	})
	// A client that raises the flag as it sends its first write, as an
	// urgent worker would while the write is in flight.
	var yield atomic.Bool
	var writes atomic.Int64
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet {
				writes.Add(1)
				yield.Store(true)
			}
			return rt.RoundTrip(r)
		})
	})
	client, err := kueueclient.NewForConfig(cfg)
	require.NoError(t, err)
	listers := kueueListers(ctx, t)
	a := &apply.Applier{Kueue: client, Metrics: metrics.New(), Workers: 2, Now: time.Now, Listers: listers}
	n := projector.Node{Name: team, Role: v1beta1.RoleClusterQueue, Parent: "yd-cohort", Ready: true,
		Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse("4")}}}
	no := projector.ProjectNode(&n, projector.Input{EnrolledNamespaces: projector.Namespaces(namespaces), CoverResources: projector.DefaultCoverResources()})

	res := a.ApplyNode(ctx, &no, apply.Pass{Yield: &yield})
	require.Empty(t, res.Errors)
	require.True(t, res.Yielded, "the flag was raised during the first write")
	require.Equal(t, 1, res.Writes, "the write in flight, the ClusterQueue, and no more")
	require.Equal(t, int64(1), writes.Load())

	testutil.Eventually(t, 30*time.Second, func() string {
		if _, err := listers.ClusterQueues.Get(team); err != nil {
			return err.Error()
		}
		return ""
	})
	var again atomic.Bool
	res = a.ApplyNode(ctx, &no, apply.Pass{Yield: &again})
	require.Empty(t, res.Errors)
	require.False(t, res.Yielded)
	require.Equal(t, 2, res.Writes, "the two LocalQueues the yielded pass left")
	require.Equal(t, 1, res.Confirmed, "the ClusterQueue")
}
