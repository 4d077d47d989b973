package manager

import (
	"strconv"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// metricsSnapshot copies the state's figures for a scrape, under the
// reducer's lock (View), so one scrape reads one consistent state. It
// copies plain numbers only; the cost is O(tree nodes + budgets + pairs +
// Kubernetes Nodes), about what one projection pass reads, and on a
// management plane the members' copies and their usage once more
// (members x tree nodes).
func (m *Manager) metricsSnapshot() metrics.Snapshot {
	s := metrics.Snapshot{Plane: m.opts.Mode, StreamDepth: m.stream.Len()}
	m.View(func(st *state.State) {
		cfg := st.Config()
		s.EnrolledNamespaces = len(cfg.EnrolledNamespaces)
		s.ReportInterval = cfg.ReportInterval.Duration
		for src := range st.FailingSources() {
			s.FailingSources = append(s.FailingSources, src)
		}
		for _, nv := range st.Nodes() {
			role := string(nv.Spec.Role)
			s.Nodes = append(s.Nodes, metrics.Node{Quota: nv.Name, Role: role, Reason: string(nv.Reason), Ready: nv.Ready()})
			var usage map[state.Pair]metrics.Usage
			if nv.Spec.Role == v1beta1.RoleClusterQueue {
				// On a plane, the members' sums: what the team's status shows.
				usage = map[state.Pair]metrics.Usage{}
				for _, u := range st.TeamUsage(nv.Name) {
					usage[state.Pair{Resource: u.Resource, Flavor: u.Flavor}] = metrics.Usage{
						Admitted: u.Admitted.AsApproximateFloat64(), Reserved: u.Reserved.AsApproximateFloat64(), Borrowed: u.Borrowed.AsApproximateFloat64()}
				}
			}
			for _, b := range nv.Spec.Budgets {
				mb := metrics.Budget{Quota: nv.Name, Role: role, Resource: b.ResourceName, Flavor: b.ResourceFlavor, Nominal: b.Nominal.AsApproximateFloat64()}
				if usage != nil {
					u := usage[state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}]
					mb.Usage = &u
				}
				s.Budgets = append(s.Budgets, mb)
			}
		}
		var fleet []projector.FleetNode
		for _, mv := range st.Members() {
			if fleet == nil {
				fleet = projector.FleetFromState(st)
			}
			behind := 0
			for _, c := range projector.Copies(fleet, mv.Name, m.opts.Origin).Copies {
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
				add := func(p part) {
					if _, ok := parts[p]; !ok {
						parts[p] = metrics.Usage{}
						order = append(order, p)
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
				for _, p := range order {
					s.ShareUsage = append(s.ShareUsage, metrics.ShareUsage{Quota: nv.Name, Resource: p.pair.Resource, Flavor: p.pair.Flavor, Cluster: p.cluster,
						Usage: parts[p]})
				}
			}
		}
		if cfg.Mode == events.ModeManagement {
			// What the members may hold of each budget of the fleet tree.
			for _, nv := range st.Nodes() {
				for _, b := range nv.Spec.Budgets {
					p := state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}
					s.FleetHeld = append(s.FleetHeld, metrics.FleetHeld{Quota: nv.Name, Resource: p.Resource, Flavor: p.Flavor, Held: st.FleetHeld(nv.Name, p).Float()})
				}
			}
		}
		if s.Members != nil {
			// A plane measures nothing of its own: its capacity is the
			// members' (Installed and Unavailable are theirs to report).
			for _, c := range st.CapacityStatus() {
				s.Capacity = append(s.Capacity, metrics.Capacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor,
					Allocatable: c.Allocatable.AsApproximateFloat64(), HighWater: c.HighWaterMark.AsApproximateFloat64(), ObservedAt: c.ObservedAt.Time})
			}
		} else {
			for _, c := range st.Capacity() {
				s.Capacity = append(s.Capacity, metrics.Capacity{Resource: c.Resource, Flavor: c.Flavor,
					Allocatable: c.Allocatable.Float(), Installed: c.Installed.Float(), Unavailable: c.Unavailable.Float(),
					HighWater: c.HighWaterMark.Float(), ObservedAt: c.ObservedAt})
			}
		}
		s.Schedulable, s.Cordoned, s.NotReady = st.MachineCounts()
		perResource := map[[2]string]float64{}
		nodes := map[string]map[string]struct{}{state.ReasonNoMatchingFlavor: {}, state.ReasonAmbiguousFlavor: {}}
		for _, u := range append(st.Unattributed(), st.UnattributedDRA()...) {
			perResource[[2]string{u.Resource, u.Reason}] += u.Amount.Float()
			nodes[u.Reason][u.Node] = struct{}{}
		}
		for k, a := range perResource {
			s.Unattributed = append(s.Unattributed, metrics.Unattributed{Resource: k[0], Reason: k[1], Amount: a})
		}
		// The counts are there at 0 too: an alert reads them, and a series
		// that exists only while there is a problem cannot be told from a
		// missing scrape.
		s.UnattributedNodes = map[string]int{}
		for reason, n := range nodes {
			s.UnattributedNodes[reason] = len(n)
		}
		for _, u := range st.Unbudgeted() {
			if s.DRAUnbudgeted == nil {
				s.DRAUnbudgeted = map[string]int{}
			}
			s.DRAUnbudgeted[u.DeviceClass] = int(u.Devices)
		}
	})
	return s
}
