// Package integration tests the AcceleratorQuota API on a real
// kube-apiserver and etcd: CRD validation, the status subresource, and the
// printer columns as the built kubectl shows them.
package integration
