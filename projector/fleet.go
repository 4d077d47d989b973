package projector

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// The fleet half of the projector: on a management plane, the
// AcceleratorQuota copies each member cluster should hold. A member gets a
// copy of every team that has a share there, with the team's share in
// place of each fleet budget, and of the Cohorts above it as topology
// without budgets, so that the copies' parentRefs resolve on the member;
// never of root, which the member's own manager creates. Copies carry no
// split (no policy, no perCluster): a member enforces a number, it does
// not split one again.

// FleetNode is what the fleet half reads of one node of the fleet tree.
type FleetNode struct {
	Name       string
	UID        string
	Generation int64
	Spec       *v1beta1.AcceleratorQuotaSpec
	// Parent is the parent the node's place follows; Depth its edges
	// below root (-1 when it does not reach root).
	Parent string
	Depth  int
	// Ready is false for a node that breaks a rule or sits below one that
	// does: its copies are held on every member as they are.
	Ready bool
	// Splits are a team's budgets split among the members.
	Splits []state.BudgetSplit
	// Deleting is a node being deleted: its copies go, Ready or not.
	Deleting bool
	// Plans are, for a team, what each member's copy is to be written
	// with, or that it is to go (state.State.Plans): a copy's budgets are
	// its member's share only as far as the fleet's budget lets each
	// step go (lower before raise).
	Plans map[string]state.CopyPlan
}

// FleetFromState reads the fleet tree from the state, by name.
func FleetFromState(s *state.State) []FleetNode {
	views := s.Nodes()
	out := make([]FleetNode, 0, len(views))
	for _, nv := range views {
		out = append(out, FleetNode{Name: nv.Name, UID: nv.UID, Generation: nv.Generation, Spec: nv.Spec,
			Parent: nv.Parent, Depth: nv.Depth, Ready: nv.Status.Ready(), Splits: s.Splits(nv.Name),
			Deleting: nv.Deleting, Plans: s.Plans(nv.Name)})
	}
	return out
}

// MemberCopies is what one member cluster should hold.
type MemberCopies struct {
	// Copies are the copies to write, parents before children (by depth,
	// then name): a member refuses a node whose parent it does not hold.
	Copies []*v1beta1.AcceleratorQuota
	// Held are the fleet nodes that are not Ready: whatever copy of them
	// the member holds is left exactly as it is, neither written nor
	// swept. Every other copy of this origin that Copies does not list is
	// to be swept.
	Held []string
}

// Copies computes the copies member cluster should hold of the fleet
// tree nodes (by name, as FleetFromState gives them), marked as written by
// origin. It is pure: the same nodes give the same copies.
func Copies(nodes []FleetNode, cluster, origin string) MemberCopies {
	byName := fleetIndex(nodes)
	sel := selectCopies(nodes, byName, cluster)
	out := MemberCopies{Held: sel.held}
	for _, n := range sel.topology {
		out.Copies = append(out.Copies, copyOf(n, cluster, origin))
	}
	for _, n := range sel.teams {
		out.Copies = append(out.Copies, teamCopy(n, cluster, origin, n.Plans[cluster]))
	}
	slices.SortFunc(out.Copies, func(a, b *v1beta1.AcceleratorQuota) int {
		if c := cmp.Compare(byName[a.Name].Depth, byName[b.Name].Depth); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}

func fleetIndex(nodes []FleetNode) map[string]*FleetNode {
	byName := make(map[string]*FleetNode, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	return byName
}

// selection is which fleet nodes a member should hold a copy of: teams
// and the Ready Cohorts above them (topology), in no order; and the nodes
// held as they are.
type selection struct {
	teams, topology []*FleetNode
	held            []string
}

// selectCopies is what Copies writes for cluster, without building the
// copies.
func selectCopies(nodes []FleetNode, byName map[string]*FleetNode, cluster string) selection {
	var out selection
	topology := map[string]bool{} // Cohorts to copy as topology
	for i := range nodes {
		n := &nodes[i]
		if n.Name == v1beta1.RootName || n.Depth < 0 {
			continue
		}
		plan, planned := n.Plans[cluster]
		switch {
		case n.Spec.Role == v1beta1.RoleClusterQueue && planned:
			if plan.Delete {
				continue // swept
			}
			out.teams = append(out.teams, n)
		case !n.Ready && !n.Deleting:
			out.held = append(out.held, n.Name)
		default:
			continue
		}
		// The Cohorts above it, so that its copy's parentRef resolves: a
		// held node's copy may be on the member, and its parent must stay.
		for p := byName[n.Parent]; p != nil && p.Name != v1beta1.RootName && !topology[p.Name]; p = byName[p.Parent] {
			topology[p.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(topology)) {
		if n := byName[name]; n.Ready {
			out.topology = append(out.topology, n)
		}
	}
	return out
}

// Behind counts the copies cluster should hold (Copies) that it lacks,
// or holds made from an older generation of their node; have are the
// copies it holds, sorted by node (state.MemberView.Copies).
func Behind(nodes []FleetNode, byName map[string]*FleetNode, cluster string, have []events.MemberCopy) int {
	sel := selectCopies(nodes, byName, cluster)
	behind := 0
	for _, group := range [][]*FleetNode{sel.topology, sel.teams} {
		for _, n := range group {
			i, ok := slices.BinarySearchFunc(have, n.Name, func(c events.MemberCopy, name string) int { return cmp.Compare(c.Node, name) })
			if !ok || have[i].Applied != n.Generation {
				behind++
			}
		}
	}
	return behind
}

func hasShare(n *FleetNode, cluster string) bool {
	for _, sp := range n.Splits {
		if shareOn(sp, cluster) > 0 {
			return true
		}
	}
	return false
}

func shareOn(sp state.BudgetSplit, cluster string) state.Amount {
	i, ok := slices.BinarySearchFunc(sp.Shares, cluster, func(s state.Share, c string) int { return cmp.Compare(s.Cluster, c) })
	if !ok {
		return 0
	}
	return sp.Shares[i].Amount
}

// copyOf is the copy of one fleet node on cluster: a Cohort's without
// budgets (teams are teamCopy's).
func copyOf(n *FleetNode, cluster, origin string) *v1beta1.AcceleratorQuota {
	c := &v1beta1.AcceleratorQuota{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			Labels: map[string]string{v1beta1.OriginLabel: origin},
			Annotations: map[string]string{
				v1beta1.OriginUIDAnnotation:        n.UID,
				v1beta1.SourceGenerationAnnotation: strconv.FormatInt(n.Generation, 10),
				v1beta1.ClusterAnnotation:          cluster,
			},
		},
		Spec: v1beta1.AcceleratorQuotaSpec{Role: n.Spec.Role, ParentRef: &v1beta1.ParentReference{Name: n.Parent}},
	}
	c.SetGroupVersionKind(v1beta1.SchemeGroupVersion.WithKind("AcceleratorQuota"))
	return c
}

// teamCopy is a team's copy on cluster as its plan says: each planned
// budget's nominal, its borrowingLimit (the fleet's split, when the fleet
// budget sets one), and its lendingLimit at most the nominal (Kueue
// refuses a ClusterQueue that lends more than it has). The copy carries
// the leader's mark and, for a conditional write, the version it was
// planned from (metadata.resourceVersion: the member refuses the write if
// the copy moved since); a plan without a version creates the copy.
func teamCopy(n *FleetNode, cluster, origin string, plan state.CopyPlan) *v1beta1.AcceleratorQuota {
	c := copyOf(n, cluster, origin)
	c.ResourceVersion = plan.Version
	if plan.Fence != "" {
		c.Annotations[v1beta1.FenceAnnotation] = plan.Fence
	}
	c.Spec.PriorityTier = n.Spec.PriorityTier
	for _, pb := range plan.Budgets {
		i := slices.IndexFunc(n.Spec.Budgets, func(b v1beta1.Budget) bool {
			return b.ResourceName == pb.Resource && b.ResourceFlavor == pb.Flavor
		})
		cb := v1beta1.Budget{ResourceName: pb.Resource, ResourceFlavor: pb.Flavor, Nominal: pb.Nominal.Quantity()}
		if i >= 0 {
			b := n.Spec.Budgets[i]
			if b.BorrowingLimit != nil {
				bl := pb.Borrow.Quantity()
				cb.BorrowingLimit = &bl
			}
			if b.LendingLimit != nil {
				lend := min(state.AmountOf(*b.LendingLimit), pb.Nominal).Quantity()
				cb.LendingLimit = &lend
			}
		}
		c.Spec.Budgets = append(c.Spec.Budgets, cb)
	}
	slices.SortFunc(c.Spec.Budgets, func(a, b v1beta1.Budget) int {
		return state.Pair{Resource: a.ResourceName, Flavor: a.ResourceFlavor}.Compare(state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor})
	})
	return c
}

// StatusVersion is the resourceVersion a node's status is written on, ""
// for an unconditional write: a plane team's status carries its hold
// record, so it is written on the version the state read, or not at all
// (a compare-and-swap: see docs/manager.md, the fleet's promise).
func StatusVersion(n *Node, in Input) string {
	if in.Plane && n.Role == v1beta1.RoleClusterQueue && n.Version > 0 {
		return strconv.FormatUint(n.Version, 10)
	}
	return ""
}
