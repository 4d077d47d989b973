// Package kueue checks, on a real kube-apiserver with the real Kueue
// controller manager, that Kueue enforces budgets the way the manager
// writes them, with the queues written by hand.
package kueue
