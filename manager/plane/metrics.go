package plane

import (
	"strconv"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// Snapshot adds the fleet's figures to a scrape: each member (whether it
// answers, since when it is silent, how many of its copies are behind),
// each team's shares and each member's part of its usage, and, once
// there are members, root's capacity as their sums.
func (p *plane) Snapshot(st *state.State, s *metrics.Snapshot) {
	var fleet []projector.FleetNode
	for _, mv := range st.Members() {
		if fleet == nil {
			fleet = projector.FleetFromState(st)
		}
		behind := 0
		for _, c := range projector.Copies(fleet, mv.Name, p.opts.Origin).Copies {
			have, ok := st.CopyOn(mv.Name, c.Name)
			if !ok || strconv.FormatInt(have.Applied, 10) != c.Annotations[v1beta1.SourceGenerationAnnotation] {
				behind++
			}
		}
		mm := metrics.Member{Cluster: mv.Name, Reachable: mv.Reachable, CopiesBehind: behind}
		if !mv.Reachable {
			mm.SilentSince = mv.Since
		}
		s.Members = append(s.Members, mm)
	}
	if s.Members != nil {
		for _, nv := range st.Nodes() {
			// Each member's part of the team's usage: one series per
			// member with a share (0 until it reports) or with usage
			// reported, so that the parts add up to the team's total.
			type part struct {
				cluster string
				pair    state.Pair
			}
			parts := map[part]metrics.Usage{}
			var order []part
			add := func(pt part) {
				if _, ok := parts[pt]; !ok {
					parts[pt] = metrics.Usage{}
					order = append(order, pt)
				}
			}
			for _, sp := range st.Splits(nv.Name) {
				for _, sh := range sp.Shares {
					s.Shares = append(s.Shares, metrics.Share{Quota: nv.Name, Resource: sp.Resource, Flavor: sp.Flavor, Cluster: sh.Cluster, Nominal: sh.Amount.Float()})
					add(part{sh.Cluster, sp.Pair})
				}
			}
			for _, u := range st.MemberUsage(nv.Name) {
				add(part{u.Cluster, u.Pair})
				parts[part{u.Cluster, u.Pair}] = metrics.Usage{Admitted: u.Admitted.Float(), Reserved: u.Reserved.Float(), Borrowed: u.Borrowed.Float()}
			}
			for _, pt := range order {
				s.ShareUsage = append(s.ShareUsage, metrics.ShareUsage{Quota: nv.Name, Resource: pt.pair.Resource, Flavor: pt.pair.Flavor, Cluster: pt.cluster,
					Usage: parts[pt]})
			}
		}
	}
	// What the members may hold of each budget of the fleet tree.
	for _, nv := range st.Nodes() {
		for _, b := range nv.Spec.Budgets {
			pr := state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}
			s.FleetHeld = append(s.FleetHeld, metrics.FleetHeld{Quota: nv.Name, Resource: pr.Resource, Flavor: pr.Flavor, Held: st.FleetHeld(nv.Name, pr).Float()})
		}
	}
	if s.Members != nil {
		// A plane measures nothing of its own: its capacity is the
		// members' (Installed and Unavailable are theirs to report).
		s.Capacity = nil
		for _, c := range st.CapacityStatus() {
			s.Capacity = append(s.Capacity, metrics.Capacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor,
				Allocatable: c.Allocatable.AsApproximateFloat64(), HighWater: c.HighWaterMark.AsApproximateFloat64(), ObservedAt: c.ObservedAt.Time})
		}
	}
}
