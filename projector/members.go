package projector

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// RosterOf is root's status.members on a management plane: the state's
// Roster, with the copies each member is behind on as the fleet half
// computes them (Behind). nodes are the fleet tree (FleetFromState). At
// most v1beta1.MaxMemberStatuses entries, members first. It costs
// O(members x tree nodes).
func RosterOf(s *state.State, nodes []FleetNode, origin string) []v1beta1.MemberStatus {
	roster := s.Roster()
	if len(roster) == 0 {
		return nil
	}
	byName := fleetIndex(nodes)
	copies := map[string][]events.MemberCopy{}
	for _, mv := range s.Members() {
		copies[mv.Name] = mv.Copies
	}
	out := make([]v1beta1.MemberStatus, 0, min(len(roster), v1beta1.MaxMemberStatuses))
	for _, e := range roster {
		if len(out) == v1beta1.MaxMemberStatuses {
			break
		}
		behind := 0
		if e.State == v1beta1.MemberStateMember {
			behind = Behind(nodes, byName, e.Name, copies[e.Name])
			e = e.Behind(behind)
		}
		out = append(out, memberStatus(e, behind))
	}
	return out
}

func memberStatus(e state.RosterEntry, behind int) v1beta1.MemberStatus {
	ms := v1beta1.MemberStatus{Cluster: e.Name, State: e.State, Reachable: e.Reachable, Reported: e.Reported, SplitOut: e.SplitOut,
		Copies: int32(e.Copies), CopiesBehind: int32(behind), RaisesWaiting: int32(e.RaisesWaiting), ReleasesAwaited: int32(e.ReleasesAwaited),
		Reason: e.Reason, Message: e.Message}
	if !e.Since.IsZero() {
		t := metav1.NewTime(e.Since)
		ms.Since = &t
	}
	if !e.LastReport.IsZero() {
		t := metav1.NewTime(e.LastReport)
		ms.LastReport = &t
	}
	return ms
}
