// Package pods runs the guide's way of charging serving workloads: Pods
// labelled with a team's queue, on the real Kueue with its pod integration,
// are gated until the team's ClusterQueue admits them, admitted up to the
// budget (borrowing included, also from a sibling Cohort's idle quota), and
// counted as ADMITTED on the team's AcceleratorQuota.
package pods
