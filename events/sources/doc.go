// Package sources turns client-go informer notifications into events.
//
// A [Handlers] value gives one cache.ResourceEventHandler per watched type:
// AcceleratorQuota, Node, Kueue ResourceFlavor and Kueue ClusterQueue. Each
// handler does nothing but convert the object to its compact form (see
// [QuotaOf], [NodeOf], [FlavorOf], [QueueOf]), stamp it with the injected
// clock and publish it. Deletes, including cache.DeletedFinalStateUnknown
// tombstones, become delete events by key. An update whose compact form is
// unchanged (a Node heartbeat, a status write of our own conditions) is
// dropped, so it neither fills the log nor wakes the reducer.
//
// A Node informer whose transform replaces each Node by a [CachedNode]
// (the manager's does) is handled by [Handlers.CachedNodes]: the compact
// form is then made once, in the transform, and the cache, the event and
// the state hold that one record.
//
// [RunTicker] publishes the timer ticks, [PublishConfig] the
// configuration, and [PublishSynced] the marker that every informer's
// initial list has been handled, so that every input of the state arrives
// through the same stream.
package sources
