// Package dra checks DRA capacity end to end: on a real kube-apiserver with
// the DRA API and its partitionable-device and extended-resource gates on,
// the manager measures ResourceSlices into root's capacity, and the real
// Kueue, configured with the same deviceClassMappings, admits
// ResourceClaimTemplate and extended-resource workloads against a team's
// projected ClusterQueue.
package dra
