package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"
	kueuelisters "sigs.k8s.io/kueue/client-go/listers/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
)

// cachedAs turns a desired apply configuration into the typed object an
// informer would hold once it is applied, with fields the server adds.
func cachedAs[T any](t testing.TB, desired any, rv int) *T {
	data, err := json.Marshal(desired)
	if err != nil {
		t.Fatal(err)
	}
	var obj T
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	if o, ok := any(&obj).(interface{ SetResourceVersion(string) }); ok {
		o.SetResourceVersion(fmt.Sprint(rv))
	}
	return &obj
}

// bigProjection is 1,000 teams in 50 cohorts with 20 enrolled namespaces:
// 51 Cohorts, 1,000 ClusterQueues and 20,000 LocalQueues.
func bigProjection() *projector.Output {
	in := projector.Input{CoverResources: projector.DefaultCoverResources()}
	for i := 0; i < 20; i++ {
		in.EnrolledNamespaces = append(in.EnrolledNamespaces, fmt.Sprintf("ns-%02d", i))
	}
	in.Nodes = append(in.Nodes, projector.Node{Name: "root", Role: v1beta1.RoleCohort, Ready: true})
	for c := 0; c < 50; c++ {
		in.Nodes = append(in.Nodes, projector.Node{Name: fmt.Sprintf("cohort-%02d", c), Role: v1beta1.RoleCohort, Parent: "root", Ready: true})
	}
	for i := 0; i < 1000; i++ {
		in.Nodes = append(in.Nodes, projector.Node{Name: fmt.Sprintf("team-%04d", i), Role: v1beta1.RoleClusterQueue, Parent: fmt.Sprintf("cohort-%02d", i%50), Ready: true,
			Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse("8")}}})
	}
	return projector.Project(in)
}

// BenchmarkPassInPlace measures one materialization pass over 21k objects
// that are all in place: the comparison with the caches, no request.
func BenchmarkPassInPlace(b *testing.B) {
	out := bigProjection()
	ci := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	qi := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	li := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	rv := 1
	for _, d := range out.Cohorts {
		_ = ci.Add(cachedAs[kueuev1beta2.Cohort](b, d, rv))
		rv++
	}
	for _, d := range out.ClusterQueues {
		cq := cachedAs[kueuev1beta2.ClusterQueue](b, d, rv)
		cq.Spec.QueueingStrategy = kueuev1beta2.BestEffortFIFO
		_ = qi.Add(cq)
		rv++
	}
	for _, d := range out.LocalQueues {
		_ = li.Add(cachedAs[kueuev1beta2.LocalQueue](b, d, rv))
		rv++
	}
	// The client is never called: every object is in place. (A fake is fine
	// for that; everything that writes is tested on a real apiserver.)
	a := &Applier{Kueue: kueuefake.NewSimpleClientset(), Metrics: metrics.New(), Workers: 8, Now: time.Now, Listers: Listers{
		Cohorts: kueuelisters.NewCohortLister(ci), ClusterQueues: kueuelisters.NewClusterQueueLister(qi), LocalQueues: kueuelisters.NewLocalQueueLister(li),
	}}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := a.ApplyObjects(ctx, out, Pass{})
		if res.Writes != 0 || res.Confirmed != 21051 {
			b.Fatalf("writes %d, confirmed %d; want 0 and 21051", res.Writes, res.Confirmed)
		}
	}
}
