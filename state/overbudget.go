package state

import (
	"fmt"
	"slices"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// Excess is a team's admitted usage of one pair above its budget: what
// its ClusterQueue may hold, nominal plus borrowingLimit (unset is 0, as
// the projector writes it). Kueue does not evict admitted Workloads when a
// ClusterQueue's quota drops below their usage: they run on above it.
type Excess struct {
	Pair
	Admitted       Amount
	Nominal        Amount
	BorrowingLimit Amount
	// Budget is Nominal plus BorrowingLimit; Above is Admitted minus it.
	Budget Amount
	Above  Amount
	// Budgeted is false for a pair the spec has no budget for: the team
	// may hold none of it.
	Budgeted bool
}

// budgetOf is what a team's spec lets it hold of each pair it budgets.
func budgetOf(spec *v1beta1.AcceleratorQuotaSpec) map[Pair]Excess {
	out := map[Pair]Excess{}
	if spec == nil || spec.Role != v1beta1.RoleClusterQueue {
		return out
	}
	for _, b := range spec.Budgets {
		e := Excess{Pair: Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}, Nominal: AmountOf(b.Nominal), Budgeted: true}
		if b.BorrowingLimit != nil {
			e.BorrowingLimit = AmountOf(*b.BorrowingLimit)
		}
		e.Budget = e.Nominal + e.BorrowingLimit
		out[e.Pair] = e
	}
	return out
}

// AboveBudget lists, by pair, the admitted usage of a team (usage, from
// its ClusterQueue's status) above the budgets of spec. A pair that spec
// does not budget has a budget of 0.
func AboveBudget(spec *v1beta1.AcceleratorQuotaSpec, usage []events.Usage) []Excess {
	budgets := budgetOf(spec)
	var out []Excess
	for _, u := range usage {
		p := Pair{Resource: u.Resource, Flavor: u.Flavor}
		e := budgets[p]
		e.Pair, e.Admitted = p, AmountOf(u.Admitted)
		if e.Admitted > e.Budget {
			e.Above = e.Admitted - e.Budget
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Excess) int { return a.Pair.Compare(b.Pair) })
	return out
}

// LoweredBelowUsage lists the pairs whose budget a write of a team from
// old to spec lowers (a smaller nominal plus borrowingLimit, or a budget
// removed) and that the team's admitted usage is above afterwards: what
// the webhook warns about when it admits the write. Nothing for a write
// that lowers nothing, creates the team, or deletes it.
func LoweredBelowUsage(old, spec *v1beta1.AcceleratorQuotaSpec, usage []events.Usage) []Excess {
	if old == nil || spec == nil || old.Role != v1beta1.RoleClusterQueue || spec.Role != v1beta1.RoleClusterQueue {
		return nil
	}
	before := budgetOf(old)
	var out []Excess
	for _, e := range AboveBudget(spec, usage) {
		if b, ok := before[e.Pair]; ok && e.Budget < b.Budget {
			out = append(out, e)
		}
	}
	return out
}

// Message is the excess in words, for team.
func (e Excess) Message(team string) string {
	budget := fmt.Sprintf("nominal %s", e.Nominal)
	switch {
	case !e.Budgeted:
		budget = "no budget"
	case e.BorrowingLimit > 0:
		budget += fmt.Sprintf(" + borrowingLimit %s", e.BorrowingLimit)
	}
	return fmt.Sprintf("%s: admitted %s on %s is %s, %s above its budget of %s (%s)",
		team, e.Resource, e.Flavor, e.Admitted, e.Above, e.Budget, budget)
}

// LoweringWarnings are the admission warnings of a write of team name from
// old to spec that the rule book admits: one per pair whose budget it
// lowers below the team's admitted usage. Kueue does not evict admitted
// Workloads, so they keep running above the new budget; the warning says
// where to see them. They never change a verdict.
func (s *State) LoweringWarnings(name string, old, spec *v1beta1.AcceleratorQuotaSpec) []string {
	if old == nil {
		if nv, ok := s.Node(name); ok {
			old = nv.Spec
		}
	}
	var out []string
	for _, e := range LoweredBelowUsage(old, spec, s.TeamUsage(name)) {
		out = append(out, e.Message(name)+
			". Kueue does not evict admitted Workloads: they keep running above the budget until they end or a lender's work reclaims the quota; kubectl ome quota plan names them")
	}
	return out
}
