// Package impact computes what a change of the quota tree does to the work
// that Kueue runs: per node whose budgets change, the old and new amounts;
// per team, the admitted usage left above its new budget and the admitted
// Workloads that make it up, in the order Kueue's preemption takes them;
// which borrowing Workloads Kueue reclaims when lenders bring their own
// work, and which it leaves; and which pending Workloads a raise lets in.
//
// It is pure: it reads the core's state before and after the change, the
// Kueue objects and Workloads it is given, and simulates Kueue with
// kueuesim. kubectl ome quota plan gives it the live cluster; the replay
// gives it a recorded state, with no Workloads, and gets the amounts only.
package impact
