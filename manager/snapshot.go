package manager

import (
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// input reads the state into the projection's input; m.mu is held.
func (m *Manager) input() projector.Input {
	c := m.st.Config()
	return projector.FromState(m.st, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources), m.outcomes)
}

// settings reads what projecting one node needs besides the node; m.mu is
// held.
func (m *Manager) settings() projector.Input {
	c := m.st.Config()
	return projector.Settings(m.st, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources), nil)
}

// publishMetrics rewrites the gauges from one projection input, whole, so
// that a series disappears with its cause.
func (m *Manager) publishMetrics(in projector.Input, stray []state.Unattributed) {
	mt := m.metrics
	for _, g := range []interface{ Reset() }{mt.BudgetNominal, mt.BudgetAdmitted, mt.BudgetReserved, mt.BudgetBorrowed,
		mt.CapacityAllocatable, mt.CapacityHighWaterMark, mt.CapacityUnattributed, mt.NodeStates, mt.DRAUnbudgeted} {
		g.Reset()
	}
	states := map[string]float64{}
	for _, n := range in.Nodes {
		state := "Ready"
		if !n.Ready {
			state = n.Reason
		}
		states[state]++
		for _, b := range n.Budgets {
			l := []string{ModeWorkload, n.Name, string(n.Role), b.ResourceName, b.ResourceFlavor}
			mt.BudgetNominal.WithLabelValues(l...).Set(b.Nominal.AsApproximateFloat64())
			if n.Role != "ClusterQueue" {
				continue
			}
			u := n.Usage[projector.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}]
			mt.BudgetAdmitted.WithLabelValues(l...).Set(u.Admitted.AsApproximateFloat64())
			mt.BudgetReserved.WithLabelValues(l...).Set(u.Reserved.AsApproximateFloat64())
			mt.BudgetBorrowed.WithLabelValues(l...).Set(u.Borrowed.AsApproximateFloat64())
		}
	}
	for s, v := range states {
		mt.NodeStates.WithLabelValues(s).Set(v)
	}
	for _, c := range in.Capacity {
		mt.CapacityAllocatable.WithLabelValues(c.ResourceName, c.ResourceFlavor).Set(c.Allocatable.AsApproximateFloat64())
		mt.CapacityHighWaterMark.WithLabelValues(c.ResourceName, c.ResourceFlavor).Set(c.HighWaterMark.AsApproximateFloat64())
	}
	for _, u := range stray {
		mt.CapacityUnattributed.WithLabelValues(u.Node, u.Resource, "NoMatchingFlavor").Set(float64(u.Amount) / 1000) // Amount is in milli-units
	}
	for _, u := range in.Unbudgeted {
		mt.DRAUnbudgeted.WithLabelValues(u.DeviceClassName).Set(float64(u.Devices))
	}
}
