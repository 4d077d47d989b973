package sources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func cached(n *corev1.Node) *CachedNode {
	return &CachedNode{Name: n.Name, ResourceVersion: n.ResourceVersion, Node: NodeOf(n)}
}

// The handler of a cache of CachedNodes publishes what the Node handler
// publishes for the same notifications, and the record it publishes is
// the one the cache holds.
func TestCachedNodeHandler(t *testing.T) {
	h, rec, errs := newHandlers()
	nodes := h.CachedNodes()
	n1 := gpuNode("n1", "8", true)
	c1 := cached(n1)
	nodes.OnAdd(c1, true)

	beat := n1.DeepCopy()
	beat.ResourceVersion = "2"
	beat.Status.Conditions[1].LastHeartbeatTime = metav1.NewTime(t0.Add(1))
	cbeat := cached(beat)
	nodes.OnUpdate(c1, cbeat)
	same := beat.DeepCopy()
	same.Status.Capacity["nvidia.com/gpu"] = resource.MustParse("8000m")
	csame := cached(same)
	nodes.OnUpdate(cbeat, csame)
	cordoned := same.DeepCopy()
	cordoned.Spec.Unschedulable = true
	ccordoned := cached(cordoned)
	nodes.OnUpdate(csame, ccordoned)

	nodes.OnDelete(ccordoned)
	nodes.OnDelete(cache.DeletedFinalStateUnknown{Key: "n2", Obj: cached(gpuNode("n2", "4", true))})
	nodes.OnDelete(cache.DeletedFinalStateUnknown{Key: "n3"})
	nodes.OnAdd(gpuNode("n4", "8", true), false) // a Node: the informer is wired to the wrong handler

	want := []string{"#0 Node upsert n1", "#0 Node upsert n1", "#0 Node delete n1", "#0 Node delete n2", "#0 Node delete n3"}
	if diff := cmp.Diff(want, rec.summary()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if rec.events[0].Node != c1.Node || rec.events[1].Node != ccordoned.Node {
		t.Error("the events do not carry the records the cache holds")
	}
	if !rec.events[1].Node.Unschedulable {
		t.Errorf("update: %+v, want cordoned", rec.events[1].Node)
	}
	if len(*errs) != 1 {
		t.Errorf("errors: %v, want one for the Node", *errs)
	}
}

// client-go's cache reads a CachedNode's key and resourceVersion through
// meta.Accessor, as it reads a Node's.
func TestCachedNodeMeta(t *testing.T) {
	c := cached(gpuNode("n1", "8", true))
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(c)
	if err != nil || key != "n1" {
		t.Fatalf("key %q, %v", key, err)
	}
	a, err := meta.Accessor(c)
	if err != nil || a.GetResourceVersion() != "1" || a.GetName() != "n1" {
		t.Fatalf("accessor: %v, %v", a, err)
	}
	if cp := c.DeepCopyObject().(*CachedNode); cp == c || *cp != *c {
		t.Fatalf("copy %+v of %+v", cp, c)
	}
}
