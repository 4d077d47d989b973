// Package plugin tests `kubectl ome quota` against a real kube-apiserver,
// etcd and Kueue on loopback, with the quota manager running and its
// webhook installed: tree, status and validate on the guide's tree, and on
// a tree frozen by a node's deletion.
package plugin
