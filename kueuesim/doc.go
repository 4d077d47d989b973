// Package kueuesim reproduces, offline, the decisions of Kueue v0.17's
// scheduler that a change of quota touches: the quota that each
// ClusterQueue and Cohort holds through a tree of Cohorts (nominal quota,
// borrowing and lending limits), which admitted Workloads its classical
// preemption picks when a Workload needs room, in which order, and which
// pending Workloads its scheduling cycles admit.
//
// It is a port of Kueue's own rules, kept as close to their structure as
// Go allows so that each can be checked against its source:
//
//   - quota and usage through the Cohort tree: pkg/cache/scheduler
//     (resource_node.go: SubtreeQuota, localQuota, available,
//     potentialAvailable, addUsage, removeUsage);
//   - classical preemption: pkg/scheduler/preemption (preemption.go,
//     classical/, common/): candidates in the ClusterQueue, hierarchical
//     reclaim and reclaim by priority in the Cohort tree, their order
//     (evicted first, other ClusterQueues first, lower priority first,
//     most recently admitted first, then uid), removal until the
//     Workload fits and the fill-back of candidates not needed, with and
//     without borrowing;
//   - flavor assignment: pkg/scheduler/flavorassigner (fit, preempt,
//     no fit, borrowing level, flavor fungibility, node selectors and
//     taints of ResourceFlavors);
//   - the scheduling cycle: pkg/scheduler (one head per ClusterQueue,
//     entries ordered by borrowing, priority and queue time, preemption
//     targets not overlapping within a cycle).
//
// Not modelled, as the quota manager's ClusterQueues use none of it: fair
// sharing and admission fair sharing, topology-aware scheduling, admission
// checks, partial admission, elastic workload slices, priority boosts and
// the SchedulerTimestampPreemptionBuffer gate (both off by default in
// v0.17), requeueing backoffs, and the LimitRanges of namespaces.
//
// The package is pure: it reads Kueue's API types and returns values, with
// no client, no clock and no randomness, so that the plugin, the replay
// and the tests share it.
package kueuesim
