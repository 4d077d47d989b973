// Package impact checks kubectl ome quota plan on a real kube-apiserver
// with the real Kueue controller manager and real Jobs: that it names the
// Workloads a lowering leaves above budget, in Kueue's order, and writes
// nothing; that the Workloads Kueue then preempts when lenders bring their
// work are the ones it named, claim by claim, over seeded random trees;
// that a raise lets in the pending Workloads it names; and that the
// webhook warns of a lowering below admitted usage, and of nothing else.
package impact
