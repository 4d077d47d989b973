package state

import (
	"cmp"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
)

// Amount is a quantity of a resource in milli-units (8 GPUs is 8000), so
// that sums and comparisons are exact integer arithmetic.
type Amount int64

// MaxAmount is the largest amount read from any one quantity (10^15 units:
// about 909Ti of a counter measured in bytes, such as DRA GPU memory);
// larger ones are clamped to it, and negative ones read as 0. Sums of up to
// 9 clamped amounts still fit in an Amount, and so do totals of up to 8Pi
// bytes; a children's total of budgets, which admins write, is a Total,
// exact at any size.
const MaxAmount Amount = 1_000_000_000_000_000_000

var maxQuantity = resource.NewMilliQuantity(int64(MaxAmount), resource.DecimalSI)

// AmountOf reads a quantity, clamped to [0, MaxAmount]; a fraction of a
// milli-unit rounds up.
func AmountOf(q resource.Quantity) Amount {
	if q.Sign() <= 0 {
		return 0
	}
	if q.Cmp(*maxQuantity) > 0 {
		return MaxAmount
	}
	return Amount(q.MilliValue())
}

// Quantity is the amount as a canonical resource.Quantity: in binary units
// (1280Gi) when it is a whole number of Mi, as counters of memory are, else
// in decimal units (32, 500m). No count of devices reaches 1Mi.
func (a Amount) Quantity() resource.Quantity {
	const mi = 1024 * 1024 * 1000
	if a > 0 && a%mi == 0 {
		return *resource.NewQuantity(int64(a/1000), resource.BinarySI)
	}
	return *resource.NewMilliQuantity(int64(a), resource.DecimalSI)
}

// String formats the amount as a quantity: "24", "500m".
func (a Amount) String() string {
	q := a.Quantity()
	return q.String()
}

// Pair is one resource on one Kueue ResourceFlavor: what a budget counts and
// what capacity is measured for.
type Pair struct {
	Resource string
	Flavor   string
}

// String is "resource@flavor", as in the printer columns.
func (p Pair) String() string { return p.Resource + "@" + p.Flavor }

// Compare orders pairs by resource, then flavor.
func (p Pair) Compare(o Pair) int {
	if c := cmp.Compare(p.Resource, o.Resource); c != 0 {
		return c
	}
	return cmp.Compare(p.Flavor, o.Flavor)
}

// Budget is what the rules read of one of a node's budgets.
type Budget struct {
	Pair
	// Nominal is the budget's nominal; 0 when one of its amounts is
	// Oversized, so that an amount the manager cannot count exactly adds
	// nothing to its parent's children total (the node itself reports
	// BudgetInvalid) and every total a message prints is exact.
	Nominal Amount
	// BorrowingLimit and LendingLimit say whether those team-only amounts
	// are set.
	BorrowingLimit bool
	LendingLimit   bool
	// LendingAboveNominal is whether lendingLimit is set above nominal,
	// compared exactly.
	LendingAboveNominal bool
	// Oversized names the first amount above MaxAmount, as written
	// ("nominal 1e30"); "" when there is none.
	Oversized string
	// Split is how a management plane splits the budget among its member
	// clusters (SplitPolicy), and PerCluster the shares an Explicit split
	// lists, sorted by cluster. Workload mode reads neither.
	Split      v1beta1.DistributionPolicy
	PerCluster []Share
}

func (b Budget) equal(o Budget) bool {
	return b.Pair == o.Pair && b.Nominal == o.Nominal && b.BorrowingLimit == o.BorrowingLimit &&
		b.LendingLimit == o.LendingLimit && b.LendingAboveNominal == o.LendingAboveNominal &&
		b.Oversized == o.Oversized && b.Split == o.Split && slices.Equal(b.PerCluster, o.PerCluster)
}

// SplitPolicy is the split a budget of spec follows: its own policy, else
// the spec's distribution policy, else Explicit when it lists shares and
// Proportional when it does not.
func SplitPolicy(spec *v1beta1.AcceleratorQuotaSpec, b *v1beta1.Budget) v1beta1.DistributionPolicy {
	switch {
	case b.Policy != "":
		return b.Policy
	case spec.Distribution != nil && spec.Distribution.Policy != "":
		return spec.Distribution.Policy
	case len(b.PerCluster) > 0:
		return v1beta1.DistributionExplicit
	}
	return v1beta1.DistributionProportional
}

// BudgetsOf reads a spec's budgets, sorted by pair.
func BudgetsOf(spec *v1beta1.AcceleratorQuotaSpec) []Budget {
	if len(spec.Budgets) == 0 {
		return nil
	}
	out := make([]Budget, 0, len(spec.Budgets))
	for _, b := range spec.Budgets {
		ob := Budget{
			Pair:                Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor},
			Nominal:             AmountOf(b.Nominal),
			BorrowingLimit:      b.BorrowingLimit != nil,
			LendingLimit:        b.LendingLimit != nil,
			LendingAboveNominal: b.LendingLimit != nil && b.LendingLimit.Cmp(b.Nominal) > 0,
			Oversized:           oversized(&b),
			Split:               SplitPolicy(spec, &b),
		}
		if len(b.PerCluster) > 0 {
			ob.PerCluster = make([]Share, len(b.PerCluster))
			for i, sh := range b.PerCluster {
				ob.PerCluster[i] = Share{Cluster: sh.Cluster, Amount: AmountOf(sh.Nominal)}
			}
			slices.SortFunc(ob.PerCluster, func(a, b Share) int { return cmp.Compare(a.Cluster, b.Cluster) })
		}
		if ob.Oversized != "" {
			ob.Nominal = 0
		}
		out = append(out, ob)
	}
	sortBudgets(out)
	return out
}

// oversized names the first of a budget's amounts above MaxAmount.
func oversized(b *v1beta1.Budget) string {
	for _, f := range []struct {
		name string
		q    *resource.Quantity
	}{{"nominal", &b.Nominal}, {"borrowingLimit", b.BorrowingLimit}, {"lendingLimit", b.LendingLimit}} {
		if f.q != nil && f.q.Cmp(*maxQuantity) > 0 {
			return f.name + " " + exactString(f.q)
		}
	}
	return ""
}

// exactString writes a large quantity exactly: as digits with a decimal
// exponent ("1e30") when it is whole, else as a decimal. Quantity.String
// is not exact beyond int64 (it prints 10^39 as "1").
func exactString(q *resource.Quantity) string {
	d := q.AsDec()
	digits, exp := d.UnscaledBig().String(), -int(d.Scale())
	for len(digits) > 1 && digits[len(digits)-1] == '0' {
		digits, exp = digits[:len(digits)-1], exp+1
	}
	if exp < 0 {
		return d.String()
	}
	if exp == 0 {
		return digits
	}
	return digits + "e" + strconv.Itoa(exp)
}

// sortBudgets sorts budgets by pair, stably: budgets of the same pair (which
// the CRD's list-map keys forbid, and the rules report) keep the order they
// were written in. The CRD allows 16 budgets, but the reducer reads whatever
// a stored object or a forged review holds, so the sort is n log n: a
// pattern-defeating quicksort of positions, ties broken by position (a
// stable sort of the budgets themselves would be n log² n), then one move of
// each budget.
func sortBudgets(b []Budget) {
	byPair := func(x, y Budget) int { return x.Pair.Compare(y.Pair) }
	if slices.IsSortedFunc(b, byPair) {
		return
	}
	// Up to the CRD's 16 budgets, the positions and the copy live on the
	// stack.
	var orderBuf [16]int
	var sortedBuf [16]Budget
	order, sorted := orderBuf[:0], sortedBuf[:0]
	if len(b) > len(orderBuf) {
		order, sorted = make([]int, 0, len(b)), make([]Budget, 0, len(b))
	}
	order, sorted = order[:len(b)], sorted[:len(b)]
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		if c := byPair(b[i], b[j]); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	for k, i := range order {
		sorted[k] = b[i]
	}
	copy(b, sorted)
}
