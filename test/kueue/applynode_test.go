package kueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/test/testutil"
)

// TestApplyNode: one node's objects are written one by one and confirmed
// from the cache afterwards; the manager's own writes are recognized as
// echoes; a namespace no longer enrolled loses the node's LocalQueue, a
// node that is gone loses all its objects, and a held node keeps them.
func TestApplyNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{"an-a", "an-b"} {
		require.NoError(t, cluster.EnsureNamespace(ctx, ns))
	}
	f := kueueinformers.NewSharedInformerFactory(cluster.Kueue, 0)
	kq := f.Kueue().V1beta2()
	// The resourceVersion each LocalQueue was first seen at: the manager's
	// create (Kueue's status updates come after).
	var mu sync.Mutex
	created := map[string]string{}
	_, err := kq.LocalQueues().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		lq := obj.(*kueuev1beta2.LocalQueue)
		mu.Lock()
		created[lq.Namespace+"/"+lq.Name] = lq.ResourceVersion
		mu.Unlock()
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Leave nothing for the other tests' sweeps.
		_ = cluster.Kueue.KueueV1beta2().ClusterQueues().Delete(context.Background(), "an-team", metav1.DeleteOptions{})
		for _, ns := range []string{"an-a", "an-b"} {
			_ = cluster.Kueue.KueueV1beta2().LocalQueues(ns).Delete(context.Background(), "an-team", metav1.DeleteOptions{})
		}
	})
	listers := apply.Listers{Cohorts: kq.Cohorts().Lister(), ClusterQueues: kq.ClusterQueues().Lister(), LocalQueues: kq.LocalQueues().Lister(),
		AQ: func(string) *v1beta1.AcceleratorQuota { return nil }}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "%v cache", typ)
	}
	a := &apply.Applier{Kueue: cluster.Kueue, Metrics: metrics.New(), Workers: 2, Now: time.Now, Listers: listers}
	team := projector.Node{Name: "an-team", Role: v1beta1.RoleClusterQueue, Parent: "an-cohort", Ready: true,
		Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse("4")}}}
	project := func(n projector.Node, ns ...string) *projector.NodeOutput {
		no := projector.ProjectNode(&n, projector.Input{EnrolledNamespaces: projector.Namespaces(ns), CoverResources: projector.DefaultCoverResources()})
		return &no
	}
	managedNamed := func() []string {
		var out []string
		if cq, err := listers.ClusterQueues.Get("an-team"); err == nil {
			out = append(out, "ClusterQueue/"+cq.Name)
		}
		lqs, _ := listers.LocalQueues.List(labels.Everything())
		for _, lq := range lqs {
			if lq.Name == "an-team" {
				out = append(out, "LocalQueue/"+lq.Namespace+"/"+lq.Name)
			}
		}
		return out
	}
	waitFor := func(want ...string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() string {
			if got := managedNamed(); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("cached %v, want %v", got, want)
			}
			return ""
		})
	}

	// Kueue's webhook answers once it is up.
	var res *apply.Result
	testutil.Eventually(t, 30*time.Second, func() string {
		res = a.ApplyNode(ctx, project(team, "an-a", "an-b"), apply.Pass{})
		if len(res.Errors) > 0 {
			return res.Errors[0].Error()
		}
		return ""
	})
	require.Equal(t, 3, res.Writes, "a ClusterQueue and two LocalQueues")
	require.Equal(t, events.OutcomeApplied, res.Outcomes["an-team"].Kind)
	waitFor("ClusterQueue/an-team", "LocalQueue/an-a/an-team", "LocalQueue/an-b/an-team")

	// The objects as the manager wrote them are its echoes; another
	// version is not.
	mu.Lock()
	rv := created["an-a/an-team"]
	mu.Unlock()
	require.True(t, a.Echo("LocalQueue/an-a/an-team", rv))
	require.False(t, a.Echo("LocalQueue/an-a/an-team", rv+"0"))

	res = a.ApplyNode(ctx, project(team, "an-a", "an-b"), apply.Pass{})
	require.Equal(t, 0, res.Writes, "nothing changed: %v", res.Errors)
	require.Equal(t, 3, res.Confirmed)

	// A namespace no longer enrolled. Its LocalQueue was confirmed at
	// its cached version; once deleted, the applier forgets it.
	gone, err := listers.LocalQueues.LocalQueues("an-b").Get("an-team")
	require.NoError(t, err)
	require.True(t, a.Echo("LocalQueue/an-b/an-team", gone.ResourceVersion), "confirmed at the cached version")
	res = a.ApplyNode(ctx, project(team, "an-a"), apply.Pass{})
	require.Equal(t, 2, res.Writes, "the ClusterQueue's namespace selector changed, and a deletion: %v", res.Errors)
	require.Equal(t, 1, res.Swept, "the LocalQueue in an-b")
	waitFor("ClusterQueue/an-team", "LocalQueue/an-a/an-team")
	require.False(t, a.Echo("LocalQueue/an-b/an-team", gone.ResourceVersion), "a deleted object is forgotten")

	// A held node keeps its objects, whatever they are.
	held := team
	held.Ready = false
	res = a.ApplyNode(ctx, project(held, "an-a"), apply.Pass{})
	require.Equal(t, 0, res.Writes)

	// A node that is gone loses them all.
	res = a.ApplyNode(ctx, &projector.NodeOutput{Name: "an-team", Materialize: true}, apply.Pass{})
	require.Equal(t, 2, res.Swept, "%v", res.Errors)
	waitFor()
}
