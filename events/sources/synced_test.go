package sources

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestSyncedWaitsForTheHandlersNotTheCache shows the race that the Synced
// marker closes, on client-go's own informer: its cache reports synced as
// soon as the initial list is stored, while its handler is still turning
// the listed Nodes into events. A start that measured once the caches had
// synced (as the manager did) saw part of the list; the marker, published
// by PublishSynced on the handler's registration, comes after every Node.
func TestSyncedWaitsForTheHandlersNotTheCache(t *testing.T) {
	// The in-memory ListWatch below answers lists, not watch-list streams.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	const n = 200
	list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for i := range n {
		list.Items = append(list.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-node-%d", i), ResourceVersion: "1"}})
	}
	lw := &cache.ListWatch{
		ListFunc:  func(metav1.ListOptions) (runtime.Object, error) { return list.DeepCopy(), nil },
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	var handled atomic.Int64
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		time.Sleep(2 * time.Millisecond) // a handler slower than the store
		handled.Add(1)
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("the cache never synced")
	}
	if at := handled.Load(); at == n {
		t.Fatalf("the handler had seen all %d Nodes when the cache synced: the race this test shows did not happen", n)
	} else {
		t.Logf("when the cache synced, the handler had seen %d of %d Nodes", at, n)
	}
	rec := &recorder{}
	if err := PublishSynced(context.Background(), rec, time.Now, reg); err != nil {
		t.Fatal(err)
	}
	if at := handled.Load(); at != n {
		t.Fatalf("the Synced marker was published after %d of %d Nodes", at, n)
	}
	if got := rec.summary(); len(got) != 1 || got[0] != "#0 Synced" {
		t.Fatalf("published %v, want the Synced marker", got)
	}
}
