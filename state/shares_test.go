package state

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestUnitOf(t *testing.T) {
	for total, want := range map[Amount]Amount{0: 1000, 4000: 1000, 32000: 1000, 2500: 100, 1500: 100, 1250: 10, 1: 1, 999: 1} {
		if got := UnitOf(total); got != want {
			t.Errorf("UnitOf(%s) = %d milli-units, want %d", total, got, want)
		}
	}
}

func TestSplitProportional(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   Amount
		weights []Weight
		want    string // cluster=share, by name
	}{
		{"even", 8000, []Weight{{"b", 16000}, {"a", 16000}}, "a=4 b=4"},
		{"whole devices stay whole", 4000, []Weight{{"c", 8000}, {"b", 8000}, {"a", 8000}}, "a=2 b=1 c=1"},
		{"largest remainder", 10000, []Weight{{"a", 1000}, {"b", 2000}, {"c", 3000}}, "a=2 b=3 c=5"},
		{"a zero mark gets nothing", 5000, []Weight{{"a", 0}, {"b", 8000}, {"c", 8000}}, "a=0 b=3 c=2"},
		{"tenths of a tenths budget", 2500, []Weight{{"a", 1000}, {"b", 2000}}, "a=800m b=1700m"},
		{"a zero budget", 0, []Weight{{"a", 8000}, {"b", 8000}}, "a=0 b=0"},
		{"one member", 7000, []Weight{{"only", 1}}, "only=7"},
		{"marks at the largest amount", 3 * MaxAmount / 1000 * 1000, []Weight{{"a", MaxAmount}, {"b", MaxAmount}, {"c", MaxAmount}}, "a=1P b=1P c=1P"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SplitProportional(tc.total, tc.weights)
			if err != nil {
				t.Fatal(err)
			}
			parts := make([]string, len(got))
			for i, s := range got {
				parts[i] = s.Cluster + "=" + s.Amount.String()
			}
			if strings.Join(parts, " ") != tc.want {
				t.Errorf("SplitProportional(%s, %v) = %s, want %s", tc.total, tc.weights, strings.Join(parts, " "), tc.want)
			}
		})
	}
}

func TestSplitProportionalRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		total   Amount
		weights []Weight
		want    string
	}{
		"all zero":   {8000, []Weight{{"a", 0}, {"b", 0}}, "every member cluster's high-water mark is 0"},
		"no members": {8000, nil, "no member cluster"},
		"twice":      {8000, []Weight{{"a", 1}, {"a", 2}}, "member cluster a is listed twice"},
		"no name":    {8000, []Weight{{"", 1}}, "without a name"},
		"negative":   {-1000, []Weight{{"a", 1}}, "negative"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := SplitProportional(tc.total, tc.weights)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SplitProportional(%s, %v) = %v, %v; want an error saying %q", tc.total, tc.weights, got, err, tc.want)
			}
		})
	}
}

// The split's promises, on random budgets and marks: the shares add up to
// the budget, each is a whole number of its unit, each is within one unit
// of its exact proportion (and below it only by less than one unit), a
// member of zero mark gets nothing, and the order of the members changes
// nothing.
func TestSplitProportionalProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 20000 {
		n := 1 + rng.IntN(12)
		weights := make([]Weight, n)
		for i := range weights {
			mark := Amount(0)
			if rng.IntN(5) > 0 {
				mark = Amount(rng.Int64N(int64([]Amount{10, 64000, MaxAmount}[rng.IntN(3)])))
			}
			weights[i] = Weight{Cluster: fmt.Sprintf("member-%02d", i), Mark: mark}
		}
		total := Amount(rng.Int64N(int64([]Amount{10000, 1 << 40, MaxAmount}[rng.IntN(3)])))
		if rng.IntN(2) == 0 {
			total -= total % 1000
		}
		shares, err := SplitProportional(total, weights)
		var basis Amount
		for _, w := range weights {
			basis += w.Mark
		}
		if basis == 0 {
			if err == nil {
				t.Fatalf("round %d: an all-zero basis split without an error", round)
			}
			continue
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		unit := UnitOf(total)
		var sum Amount
		for i, s := range shares {
			w := weights[i] // both sorted by name
			sum += s.Amount
			if s.Cluster != w.Cluster || s.Amount%unit != 0 || w.Mark == 0 && s.Amount != 0 {
				t.Fatalf("round %d: share %+v of weight %+v (unit %d)", round, s, w, unit)
			}
			// exact = total*mark/basis; the share is within (exact-unit, exact+unit).
			exact := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(int64(total)), big.NewInt(int64(w.Mark))), big.NewInt(int64(basis)))
			diff := new(big.Rat).Sub(new(big.Rat).SetInt64(int64(s.Amount)), exact)
			if diff.Abs(diff).Cmp(new(big.Rat).SetInt64(int64(unit))) >= 0 {
				t.Fatalf("round %d: %s's share %s is a unit or more from its exact part %s", round, s.Cluster, s.Amount, exact.FloatString(3))
			}
		}
		if sum != total {
			t.Fatalf("round %d: shares %v add up to %s, not %s", round, shares, sum, total)
		}
		shuffled := append([]Weight(nil), weights...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again, err := SplitProportional(total, shuffled)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(shares) {
			t.Fatalf("round %d: the members' order changed the split: %v vs %v (%v)", round, again, shares, err)
		}
	}
}

// BenchmarkSplitProportional is the plane's share work at fleet scale:
// 1,000 teams' budgets split among 100 member clusters.
func BenchmarkSplitProportional(b *testing.B) {
	weights := make([]Weight, 100)
	for i := range weights {
		weights[i] = Weight{Cluster: fmt.Sprintf("member-%03d", i), Mark: Amount(8000 * (1 + i%13))}
	}
	b.ReportAllocs()
	for b.Loop() {
		for team := range 1000 {
			if _, err := SplitProportional(Amount(1000*(1+team%97)), weights); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestCheckExplicit(t *testing.T) {
	members := []string{"east", "west"}
	if err := CheckExplicit(8000, []Share{{"west", 5000}, {"east", 3000}}, members); err != nil {
		t.Errorf("a split that adds up to the budget: %v", err)
	}
	if err := CheckExplicit(8000, []Share{{"west", 5000}}, members); err != nil {
		t.Errorf("a split below the budget: %v", err)
	}
	for name, tc := range map[string]struct {
		shares []Share
		want   string
	}{
		"over the budget": {[]Share{{"west", 5000}, {"east", 4000}}, "add up to 9, more than the budget of 8"},
		"unknown cluster": {[]Share{{"north", 1000}}, "perCluster names north, which is not a member cluster"},
		"twice":           {[]Share{{"west", 1000}, {"west", 1000}}, "perCluster lists west twice"},
		"negative":        {[]Share{{"west", -1000}}, "the share of west is negative"},
	} {
		if err := CheckExplicit(8000, tc.shares, members); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckExplicit(8, %v) = %v, want an error saying %q", name, tc.shares, err, tc.want)
		}
	}
}
