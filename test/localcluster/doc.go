// Package localcluster runs a real control plane on loopback for tests, for
// benchmarks and for `make demo`: etcd and kube-apiserver (through
// controller-runtime's envtest), optionally Kueue's controller manager beside
// them, with the AcceleratorQuota CRD and Kueue's CRDs installed.
//
// The binaries are built from the pinned modules under tools/ by
// hack/tools.sh, once, into the user cache directory. Every process it starts
// is tied to the starting process (it is killed when that process dies, even
// by SIGKILL), and Stop removes every file it wrote.
package localcluster
