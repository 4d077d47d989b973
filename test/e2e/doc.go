// Package e2e runs the guide's scenarios end to end on a real kube-apiserver,
// etcd and Kueue controller manager, on loopback.
package e2e
