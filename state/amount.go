package state

import (
	"cmp"

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
// bytes.
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
	Nominal Amount
	// BorrowingLimit and LendingLimit say whether those team-only amounts
	// are set.
	BorrowingLimit bool
	LendingLimit   bool
}

// BudgetsOf reads a spec's budgets, sorted by pair.
func BudgetsOf(spec *v1beta1.AcceleratorQuotaSpec) []Budget {
	if len(spec.Budgets) == 0 {
		return nil
	}
	out := make([]Budget, 0, len(spec.Budgets))
	for _, b := range spec.Budgets {
		out = append(out, Budget{
			Pair:           Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor},
			Nominal:        AmountOf(b.Nominal),
			BorrowingLimit: b.BorrowingLimit != nil,
			LendingLimit:   b.LendingLimit != nil,
		})
	}
	sortBudgets(out)
	return out
}

func sortBudgets(b []Budget) {
	// Insertion sort: a node has at most 16 budgets, and it is stable.
	for i := 1; i < len(b); i++ {
		for j := i; j > 0 && b[j].Pair.Compare(b[j-1].Pair) < 0; j-- {
			b[j], b[j-1] = b[j-1], b[j]
		}
	}
}
