package projector

import (
	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/state"
)

// FromState builds the projection's input from the core's state and the
// shell's settings. The state is only read.
func FromState(s *state.State, enrolled []string, cover map[string]resource.Quantity, outcomes map[string]Outcome) Input {
	in := Input{
		Capacity:           s.CapacityStatus(),
		EnrolledNamespaces: enrolled,
		CoverResources:     cover,
		Outcomes:           outcomes,
	}
	for _, u := range s.Unbudgeted() {
		in.Unbudgeted = append(in.Unbudgeted, v1beta1.UnbudgetedDevices{DeviceClassName: u.DeviceClass, Devices: u.Devices})
	}
	for _, nv := range s.Nodes() {
		n := Node{
			Name:       nv.Name,
			Generation: nv.Generation,
			Role:       nv.Spec.Role,
			Parent:     nv.Parent,
			Budgets:    nv.Spec.Budgets,
			Ready:      nv.Status.Ready(),
			Reason:     string(nv.Reason),
			Message:    nv.Message,
		}
		if nv.Spec.Role == v1beta1.RoleClusterQueue {
			for _, u := range s.Usage(nv.Name) {
				if n.Usage == nil {
					n.Usage = map[Pair]Usage{}
				}
				n.Usage[Pair{u.Resource, u.Flavor}] = Usage{Admitted: u.Admitted, Reserved: u.Reserved, Borrowed: u.Borrowed}
			}
		}
		in.Nodes = append(in.Nodes, n)
	}
	return in
}
