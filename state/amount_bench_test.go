package state

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
)

// shuffledSpec is a spec of n budgets on distinct pairs, in a drawn order.
func shuffledSpec(n int) *v1beta1.AcceleratorQuotaSpec {
	spec := &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue}
	for i := range n {
		spec.Budgets = append(spec.Budgets, v1beta1.Budget{
			ResourceName:   fmt.Sprintf("r%d", i%7),
			ResourceFlavor: fmt.Sprintf("f%06d", i),
			Nominal:        resource.MustParse("1"),
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(n, func(i, j int) { spec.Budgets[i], spec.Budgets[j] = spec.Budgets[j], spec.Budgets[i] })
	return spec
}

// TestBudgetsOfOrder checks that budgets come back sorted by pair, and that
// budgets of the same pair keep the order they were written in.
func TestBudgetsOfOrder(t *testing.T) {
	spec := shuffledSpec(1000)
	dup := func(nominal string) v1beta1.Budget {
		return v1beta1.Budget{ResourceName: "r3", ResourceFlavor: "f000010", Nominal: resource.MustParse(nominal)}
	}
	spec.Budgets = append([]v1beta1.Budget{dup("5")}, append(spec.Budgets, dup("6"))...)
	got := BudgetsOf(spec)
	if len(got) != len(spec.Budgets) {
		t.Fatalf("%d budgets, want %d", len(got), len(spec.Budgets))
	}
	if !slices.IsSortedFunc(got, func(a, b Budget) int { return a.Pair.Compare(b.Pair) }) {
		t.Fatal("budgets not sorted by pair")
	}
	var same []Amount
	for _, b := range got {
		if b.Pair == (Pair{"r3", "f000010"}) {
			same = append(same, b.Nominal)
		}
	}
	if want := []Amount{5000, 1000, 6000}; !slices.Equal(same, want) {
		t.Errorf("nominals of the repeated pair %v, want the written order %v", same, want)
	}
}

// reportPerBudget reports the time per budget and per n·log₂n: the second
// stays within a small factor from 16 to 50,000 budgets (it grows a little
// with cache misses), where a quadratic sort's would grow a thousandfold.
func reportPerBudget(b *testing.B, n int) {
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/float64(n), "ns/budget")
	b.ReportMetric(per/(float64(n)*math.Log2(float64(n))), "ns/nlogn")
}

// BenchmarkBudgetsOf is the cost of reading a spec's budgets, sort
// included, at the CRD's limit (16) and at what a forged 3 MiB object can
// carry (50,000): the time per budget grows as log n, not as n.
func BenchmarkBudgetsOf(b *testing.B) {
	for _, n := range []int{16, 1000, 50_000} {
		spec := shuffledSpec(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				BudgetsOf(spec)
			}
			reportPerBudget(b, n)
		})
	}
}

// BenchmarkSortBudgets is the sort alone, on budgets in a drawn order.
func BenchmarkSortBudgets(b *testing.B) {
	for _, n := range []int{16, 1000, 50_000} {
		in := BudgetsOf(shuffledSpec(n))
		rng := rand.New(rand.NewPCG(3, 4))
		rng.Shuffle(n, func(i, j int) { in[i], in[j] = in[j], in[i] })
		buf := make([]Budget, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				copy(buf, in)
				sortBudgets(buf)
			}
			reportPerBudget(b, n)
		})
	}
}
