package projector

import (
	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// Node is one tree node as the core sees it.
type Node struct {
	Name       string
	Generation int64
	// Version is the object's resourceVersion as the state last read it:
	// a plane's team's status, which carries its hold record, is written
	// on that version or not at all.
	Version uint64
	Role    v1beta1.Role
	Parent  string
	Budgets []v1beta1.Budget
	// Ready is true when the node and all its ancestors keep every rule.
	Ready bool
	// Reason and Message explain a node that is not Ready: the rule it breaks
	// (e.g. ContainmentViolated), or Frozen for a node below one that does.
	Reason, Message string
	// Usage is the team's usage per pair, from its ClusterQueue's status.
	Usage map[state.Pair]events.Usage
	// Splits are a team's budgets split among a management plane's
	// member clusters, and MemberUsage what each member's Kueue admitted
	// and borrowed for its copy there; nil in workload mode.
	Splits      []state.BudgetSplit
	MemberUsage []state.ClusterUsage
	// Copies is, on a plane, how each member holds the node's copy, by
	// cluster name.
	Copies map[string]events.MemberCopy
	// Holds is, on a plane's team, the hold record its status carries:
	// the one the leader is to write, else the one in place (a status
	// written without it would drop it). Waits are its members' raises
	// that wait, and Held what each member may hold now, by cluster and
	// pair.
	Holds *v1beta1.FleetHolds
	Waits map[string]state.Wait
	Held  map[string]map[state.Pair]state.Limits
	// Outcome is the leader's applier's last report on the node's Kueue
	// objects, as the state holds it: what Materialized says.
	Outcome events.Outcome
	// Since is when its conditions took their status, and Stored the
	// stamps its stored status shows: they date the conditions (stamp).
	Since  state.Since
	Stored []events.Stamp
}

// Input is everything the projection depends on.
type Input struct {
	Nodes []Node
	// Capacity is root's measurement, reported on root's status.
	Capacity []v1beta1.CapacityStatus
	// Unbudgeted DRA devices, reported on root's status.
	Unbudgeted []v1beta1.UnbudgetedDevices
	// Plane is a management plane: its nodes' enforcement objects are the
	// copies on its members, and their outcome is the copier's. Members
	// are its member clusters as the plane last heard of them.
	Plane   bool
	Members []state.MemberView
	// Leaving are the clusters that left the fleet while holding copies,
	// which the plane deletes while it reaches them.
	Leaving []state.MemberView
	// Origin is the plane's name on its copies.
	Origin string
	// Roster is, on a plane, root's status.members: every cluster of the
	// fleet at a glance (RosterOf).
	Roster []v1beta1.MemberStatus
	// EnrolledNamespaces: while empty, nothing is written to Kueue.
	EnrolledNamespaces []string
	// CoverResources are added to every ClusterQueue with these ceilings, so
	// that workloads requesting them are admitted on the team's flavors.
	CoverResources map[string]resource.Quantity
}

// CoverResources are the defaults with extra overriding them.
func CoverResources(extra map[string]resource.Quantity) map[string]resource.Quantity {
	out := DefaultCoverResources()
	for k, q := range extra {
		out[k] = q
	}
	return out
}

// DefaultCoverResources are ceilings far above any cluster's size.
func DefaultCoverResources() map[string]resource.Quantity {
	return map[string]resource.Quantity{
		"cpu":               resource.MustParse("1M"),
		"memory":            resource.MustParse("1Ei"),
		"ephemeral-storage": resource.MustParse("1Ei"),
	}
}
