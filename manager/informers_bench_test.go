package manager

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/state"
)

// BenchmarkNodeHeap reports the heap 10,000 of make perf's Nodes (one
// label, four resources, the Ready condition) hold in the manager, per
// Node: the Node cache and the state together. "slim-node" is the cache
// keeping a slimmed corev1.Node and the state its own record (before
// CachedNode); "record" is the cache keeping the record the state shares.
func BenchmarkNodeHeap(b *testing.B) {
	const nodes = 10000
	node := func(i int) *corev1.Node {
		rl := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%05d", i), ResourceVersion: fmt.Sprint(1000 + i),
				Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
			Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl.DeepCopy(),
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
	}
	slimNode := func(n *corev1.Node) (any, *events.Node) {
		out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
			Status: corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		return out, sources.NodeOf(out)
	}
	for _, form := range []struct {
		name string
		of   func(*informerSet, *corev1.Node) (any, *events.Node)
	}{
		{"slim-node", func(_ *informerSet, n *corev1.Node) (any, *events.Node) { return slimNode(n) }},
		{"record", func(s *informerSet, n *corev1.Node) (any, *events.Node) {
			obj, _ := s.slimCore(n)
			return obj, obj.(*sources.CachedNode).Node
		}},
	} {
		b.Run(form.name, func(b *testing.B) {
			var keepStore cache.Indexer
			var keepState *state.State
			for b.Loop() {
				keepStore, keepState = nil, nil
				before := heapAlloc()
				inf := &informerSet{}
				store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
				st := state.New()
				for i := range nodes {
					obj, rec := form.of(inf, node(i))
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
					ev := events.NodeUpserted(time.Unix(0, 0), rec)
					ev.Seq = st.LastSeq() + 1
					st.Apply(ev)
				}
				keepStore, keepState = store, st
				b.ReportMetric(float64(heapAlloc()-before)/nodes, "heapB/Node")
			}
			if len(keepStore.ListKeys()) != nodes || keepState.LastSeq() != nodes {
				b.Fatalf("%d cached, %d applied", len(keepStore.ListKeys()), keepState.LastSeq())
			}
		})
	}
}

func heapAlloc() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
