package replay

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/projector"
)

// StateView is what --state prints: the state's dump, who led, and every
// node's status as the projector computes it from that state.
type StateView struct {
	// State is the state's dump (state.State.Dump).
	State string `json:"state"`
	// Leader is the replica that led at that point, as the log's
	// Leadership events tell it; "" when none did.
	Leader string `json:"leader"`
	// Statuses are the AcceleratorQuotas' statuses, by node name, as the
	// leader writes them: conditions (Materialized from the applier's
	// outcomes in the log), root's capacity, teams' usage, the summary,
	// and the stamps: a condition's lastTransitionTime and root's
	// observedAt come from the log's events too (state.Since).
	Statuses map[string]*v1beta1.AcceleratorQuotaStatus `json:"statuses"`
}

// StateView returns the state the replay reached, with its statuses.
func (r *Result) StateView() StateView {
	c := r.State.Config()
	out := projector.Project(projector.FromState(r.State, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources)))
	return StateView{State: r.State.Dump(), Leader: r.State.Leader(), Statuses: out.Statuses}
}

// writeState prints the dump, then the statuses by node name.
func writeState(w io.Writer, v StateView) error {
	var b strings.Builder
	b.WriteString(v.State)
	if v.Leader != "" {
		fmt.Fprintf(&b, "statuses as the leader %s writes them from this state:\n", v.Leader)
	} else {
		b.WriteString("statuses as the projector computes them from this state; no replica led here, so none was written from it, and a Ready node shows Materialized Pending:\n")
	}
	for _, name := range slices.Sorted(maps.Keys(v.Statuses)) {
		st := v.Statuses[name]
		fmt.Fprintf(&b, "status %s observedGeneration=%d\n", name, st.ObservedGeneration)
		for _, c := range st.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s: %s (since %s)\n", c.Type, c.Status, c.Reason, c.Message, stampOf(c.LastTransitionTime.Time))
		}
		for _, c := range st.Capacity {
			fmt.Fprintf(&b, "  capacity %s@%s allocatable=%s mark=%s observedAt=%s\n", c.ResourceName, c.ResourceFlavor,
				c.Allocatable.String(), c.HighWaterMark.String(), stampOf(c.ObservedAt.Time))
		}
		for _, u := range st.Unbudgeted {
			fmt.Fprintf(&b, "  unbudgeted %s devices=%d\n", u.DeviceClassName, u.Devices)
		}
		for _, bs := range st.Budgets {
			fmt.Fprintf(&b, "  budget %s@%s nominal=%s admitted=%s reserved=%s borrowed=%s\n", bs.ResourceName, bs.ResourceFlavor,
				bs.Nominal.String(), bs.Admitted.String(), bs.Reserved.String(), bs.Borrowed.String())
		}
		if s := st.Summary; s != nil {
			fmt.Fprintf(&b, "  summary nominal=%q admitted=%q\n", s.Nominal, s.Admitted)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
