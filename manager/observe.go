package manager

import (
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// metricsSnapshot copies the state's figures for a scrape, under the
// reducer's lock (View), so one scrape reads one consistent state. It
// copies plain numbers only; the cost is O(tree nodes + budgets + pairs +
// Kubernetes Nodes), about what one projection pass reads, and what the
// mode adds (Mode.Snapshot: on a management plane, the members' copies
// and their usage once more, members x tree nodes).
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
		for _, c := range st.Capacity() {
			s.Capacity = append(s.Capacity, metrics.Capacity{Resource: c.Resource, Flavor: c.Flavor,
				Allocatable: c.Allocatable.Float(), Installed: c.Installed.Float(), Unavailable: c.Unavailable.Float(),
				HighWater: c.HighWaterMark.Float(), ObservedAt: c.ObservedAt})
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
		m.mode.Snapshot(st, &s)
	})
	return s
}
