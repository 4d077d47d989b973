package sources

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"ome.io/quota-manager/events"
)

// CachedNode is what a Node informer's cache can hold instead of the Node:
// the Node's compact form (the record its events carry) and the two fields
// the informer itself reads, its name (the cache key) and resourceVersion
// (an update with an unchanged one is a resync). The record is shared with
// the events published for it, and through them with the state: it is
// never modified. Build it in the informer's transform from [NodeOf], and
// handle the informer with [Handlers.CachedNodes].
type CachedNode struct {
	Name            string
	ResourceVersion string
	Node            *events.Node
}

// GetName is the Node's name.
func (c *CachedNode) GetName() string { return c.Name }

// GetObjectMeta gives client-go's cache (its key function, its resync
// check) the name and resourceVersion, as metadata of a Node.
func (c *CachedNode) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: c.Name, ResourceVersion: c.ResourceVersion}
}

// GetObjectKind implements runtime.Object: a CachedNode carries no kind.
func (c *CachedNode) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; the record is immutable, so
// the copy shares it.
func (c *CachedNode) DeepCopyObject() runtime.Object {
	cp := *c
	return &cp
}

func (c *CachedNode) record() *events.Node { return c.Node }

// CachedNodes handles the notifications of a Node informer whose cache
// holds CachedNodes: it publishes the records the cache holds, as [Handlers.Nodes]
// publishes the compact forms of Nodes.
func (h *Handlers) CachedNodes() cache.ResourceEventHandler {
	return handler(h, events.KindNode, (*CachedNode).record, events.NodeUpserted)
}
