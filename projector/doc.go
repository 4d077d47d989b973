// Package projector turns the core's state into what the cluster should
// hold: the Kueue objects (a Cohort per Cohort node, a ClusterQueue per team,
// a LocalQueue per team in each enrolled namespace) as server-side apply
// configurations, and every node's status. It is pure: no client, no clock,
// no randomness; the same input gives the same output, in the same order.
//
// The applier in projector/apply is the only code that writes what this
// package computes.
package projector
