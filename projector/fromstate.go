package projector

import (
	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// FromState builds the projection's input from the core's state and the
// shell's settings. The state is only read.
func FromState(s *state.State, enrolled []string, cover map[string]resource.Quantity) Input {
	in := Settings(s, enrolled, cover)
	for _, nv := range s.Nodes() {
		in.Nodes = append(in.Nodes, nodeOf(s, nv))
	}
	return in
}

// Settings is FromState without the nodes: what ProjectNode reads besides
// the node itself.
func Settings(s *state.State, enrolled []string, cover map[string]resource.Quantity) Input {
	cfg := s.Config()
	in := Input{
		Capacity:           s.CapacityStatus(),
		EnrolledNamespaces: enrolled,
		CoverResources:     cover,
		Plane:              cfg.Mode == events.ModeManagement,
		Members:            s.Members(),
		Leaving:            s.Leaving(),
		Origin:             cfg.Origin,
	}
	if in.Plane {
		in.Roster = RosterOf(s, FleetFromState(s), cfg.Origin)
	}
	for _, u := range s.Unbudgeted() {
		in.Unbudgeted = append(in.Unbudgeted, v1beta1.UnbudgetedDevices{DeviceClassName: u.DeviceClass, Devices: u.Devices})
	}
	return in
}

// NodeSettings is what projecting one node other than root reads
// besides the node: Settings without root's capacity and devices, which
// only root's status carries.
func NodeSettings(s *state.State, enrolled []string, cover map[string]resource.Quantity) Input {
	return Input{EnrolledNamespaces: enrolled, CoverResources: cover,
		Plane: s.Config().Mode == events.ModeManagement, Members: s.Members()}
}

// NodeFromState is one node of the projection's input, read from the
// state; false when the node does not exist.
func NodeFromState(s *state.State, name string) (Node, bool) {
	nv, ok := s.Node(name)
	if !ok {
		return Node{}, false
	}
	return nodeOf(s, nv), true
}

// Reported takes into n what the applier's report on the node changes in
// the state: its outcome and the stamps of its conditions (an outcome that
// flips Materialized dates it).
func (n *Node) Reported(s *state.State) {
	n.Outcome = s.Outcome(n.Name)
	n.Since, n.Stored = s.Stamps(n.Name)
}

func nodeOf(s *state.State, nv state.NodeView) Node {
	n := Node{
		Name:       nv.Name,
		Generation: nv.Generation,
		Version:    nv.Version,
		Role:       nv.Spec.Role,
		Parent:     nv.Parent,
		Budgets:    nv.Spec.Budgets,
		Ready:      nv.Status.Ready(),
		Reason:     string(nv.Reason),
		Message:    nv.Message,
		Outcome:    s.Outcome(nv.Name),
	}
	n.Since, n.Stored = s.Stamps(nv.Name)
	n.Copies = s.MemberCopies(nv.Name)
	if nv.Spec.Role == v1beta1.RoleClusterQueue && s.Config().Mode == events.ModeManagement {
		if rec, ok := s.HoldRecord(nv.Name); ok {
			n.Holds = rec
		} else {
			n.Holds = s.StoredHoldRecord(nv.Name)
		}
		n.Waits = s.Waits(nv.Name)
		for _, sp := range s.Splits(nv.Name) {
			for _, sh := range sp.Shares {
				if n.Held == nil {
					n.Held = map[string]map[state.Pair]state.Limits{}
				}
				if n.Held[sh.Cluster] == nil {
					n.Held[sh.Cluster] = map[state.Pair]state.Limits{}
				}
				n.Held[sh.Cluster][sp.Pair] = s.Ceiling(nv.Name, sh.Cluster, sp.Pair)
			}
		}
	}
	if nv.Spec.Role == v1beta1.RoleClusterQueue {
		n.Splits, n.MemberUsage = s.Splits(nv.Name), s.MemberUsage(nv.Name)
		// On a plane, a team's use is its members' summed (TeamUsage).
		for _, u := range s.TeamUsage(nv.Name) {
			if n.Usage == nil {
				n.Usage = map[state.Pair]events.Usage{}
			}
			n.Usage[state.Pair{Resource: u.Resource, Flavor: u.Flavor}] = u
		}
	}
	return n
}
