package state

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// Management mode splits each fleet budget among the member clusters. A
// Proportional split gives each member a share of the budget in proportion
// to its high-water mark of the budget's pair. The shares must add up to
// the budget exactly (a unit lost shrinks the fleet, a unit gained
// over-admits), stay in the budget's own unit (four GPUs over three
// members are 2, 1 and 1, never 1.33 each), and be the same for the same
// marks whatever order the members come in, so that nothing is rewritten
// when nothing moved.

// Weight is one member cluster's basis for a Proportional split: its
// high-water mark of the budget's pair.
type Weight struct {
	Cluster string
	Mark    Amount
}

// Share is one member cluster's part of a fleet budget.
type Share struct {
	Cluster string
	Amount  Amount
}

// UnitOf is the unit a budget of total is split in: the coarsest power of
// ten, at most one whole unit, that total is a multiple of. A budget of 4
// (or 4000m, which the API server stores as 4) splits into whole units,
// 2.5 into tenths, 1500m into hundredths; 0 into whole units.
func UnitOf(total Amount) Amount {
	unit := Amount(1)
	for unit < 1000 && total%(unit*10) == 0 {
		unit *= 10
	}
	return unit
}

// SplitProportional splits total among the members of weights in
// proportion to their marks, in total's unit (UnitOf): each member gets its
// share rounded down, and the units left over (fewer than the members) go
// one each to the members with the largest remainders, ties to the first
// cluster name. The shares add up to total exactly and come back sorted by
// cluster name. Marks of zero get nothing; marks that are all zero cannot
// be split by, and are an error, not an even split.
func SplitProportional(total Amount, weights []Weight) ([]Share, error) {
	if total < 0 {
		return nil, fmt.Errorf("the budget %s is negative", total)
	}
	if len(weights) == 0 {
		return nil, fmt.Errorf("no member cluster to split the budget %s among", total)
	}
	byName := func(a, b Weight) int { return cmp.Compare(a.Cluster, b.Cluster) }
	ws := weights
	if !slices.IsSortedFunc(ws, byName) { // the state keeps its members sorted
		ws = slices.Clone(weights)
		slices.SortFunc(ws, byName)
	}
	var basis uint64
	for i, w := range ws {
		switch {
		case w.Cluster == "":
			return nil, fmt.Errorf("a member cluster without a name in the split of %s", total)
		case i > 0 && ws[i-1].Cluster == w.Cluster:
			return nil, fmt.Errorf("member cluster %s is listed twice in the split of %s", w.Cluster, total)
		case w.Mark < 0:
			return nil, fmt.Errorf("member cluster %s has a negative mark %s", w.Cluster, w.Mark)
		}
		basis += uint64(w.Mark) // at most 10^15 each: no overflow below 18,000 members
	}
	if basis == 0 {
		return nil, fmt.Errorf("every member cluster's high-water mark is 0, so there is nothing to split the budget %s by: add capacity to a member, or split it explicitly (perCluster)", total)
	}
	unit := UnitOf(total)
	units := uint64(total / unit)
	shares := make([]Share, len(ws))
	rems := make([]uint64, len(ws))
	var placed uint64
	for i, w := range ws {
		// units*mark/basis in 128 bits: exact, and the quotient fits in 64
		// (it is at most units), so Div64 cannot overflow.
		hi, lo := bits.Mul64(units, uint64(w.Mark))
		q, r := bits.Div64(hi, lo, basis)
		shares[i] = Share{Cluster: w.Cluster, Amount: Amount(q) * unit}
		rems[i] = r
		placed += q
	}
	if left := units - placed; left > 0 {
		order := make([]int, len(ws))
		for i := range order {
			order[i] = i
		}
		// Largest remainder first; equal remainders in name order, which
		// is index order (ws is sorted by name).
		slices.SortFunc(order, func(a, b int) int {
			if c := cmp.Compare(rems[b], rems[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, i := range order[:left] {
			shares[i].Amount += unit
		}
	}
	return shares, nil
}

// CheckExplicit checks an Explicit split of a fleet budget of total: each
// share names a member cluster (members, sorted or not), none twice, and
// the shares add up to at most the budget (less leaves the rest unused,
// which is the admin's call). The error names the first problem and what
// to do.
func CheckExplicit(total Amount, shares []Share, members []string) error {
	known := make(map[string]bool, len(members))
	for _, m := range members {
		known[m] = true
	}
	seen := make(map[string]bool, len(shares))
	var sum Amount // at most 256 shares of at most MaxAmount: no overflow
	for _, sh := range shares {
		switch {
		case !known[sh.Cluster]:
			return fmt.Errorf("perCluster names %s, which is not a member cluster of the fleet (%d members): name a member, or add %s to the plane's inventory (a ClusterProfile it selects, or an entry of projection.clusters)", sh.Cluster, len(members), sh.Cluster)
		case seen[sh.Cluster]:
			return fmt.Errorf("perCluster lists %s twice: keep one share per cluster", sh.Cluster)
		case sh.Amount < 0:
			return fmt.Errorf("the share of %s is negative (%s): shares are at least 0", sh.Cluster, sh.Amount)
		}
		seen[sh.Cluster] = true
		sum += sh.Amount
	}
	if sum > total {
		return fmt.Errorf("the shares in perCluster add up to %s, more than the budget of %s: lower them, or raise the budget", sum, total)
	}
	return nil
}
