// Package fleet tests management mode's shell against a real member
// cluster (kube-apiserver and etcd on loopback): the source that reads a
// member into Member events, and the writer of the plane's copies.
package fleet
