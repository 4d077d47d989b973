package state

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

func teamSpec(budgets ...v1beta1.Budget) *v1beta1.AcceleratorQuotaSpec {
	return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"}, Budgets: budgets}
}

func gpuBudget(flavor, nominal string, borrowing ...string) v1beta1.Budget {
	b := v1beta1.Budget{ResourceName: "nvidia.com/gpu", ResourceFlavor: flavor, Nominal: resource.MustParse(nominal)}
	if len(borrowing) > 0 {
		q := resource.MustParse(borrowing[0])
		b.BorrowingLimit = &q
	}
	return b
}

func admitted(flavor, amount string) events.Usage {
	return events.Usage{Resource: "nvidia.com/gpu", Flavor: flavor, Admitted: resource.MustParse(amount)}
}

func TestLoweredBelowUsage(t *testing.T) {
	cases := map[string]struct {
		old, spec *v1beta1.AcceleratorQuotaSpec
		usage     []events.Usage
		want      []string
	}{
		"nominal lowered below usage": {
			old: teamSpec(gpuBudget("a100", "8", "4")), spec: teamSpec(gpuBudget("a100", "4", "4")),
			usage: []events.Usage{admitted("a100", "12")},
			want:  []string{"team-beta: admitted nvidia.com/gpu on a100 is 12, 4 above its budget of 8 (nominal 4 + borrowingLimit 4)"},
		},
		"borrowing limit lowered below usage": {
			old: teamSpec(gpuBudget("a100", "8", "4")), spec: teamSpec(gpuBudget("a100", "8")),
			usage: []events.Usage{admitted("a100", "12")},
			want:  []string{"team-beta: admitted nvidia.com/gpu on a100 is 12, 4 above its budget of 8 (nominal 8)"},
		},
		"budget removed": {
			old: teamSpec(gpuBudget("a100", "8"), gpuBudget("h100", "4")), spec: teamSpec(gpuBudget("a100", "8")),
			usage: []events.Usage{admitted("a100", "8"), admitted("h100", "3")},
			want:  []string{"team-beta: admitted nvidia.com/gpu on h100 is 3, 3 above its budget of 0 (no budget)"},
		},
		"lowered, still above usage": {
			old: teamSpec(gpuBudget("a100", "16")), spec: teamSpec(gpuBudget("a100", "12")),
			usage: []events.Usage{admitted("a100", "12")},
		},
		"raised while above": {
			old: teamSpec(gpuBudget("a100", "4")), spec: teamSpec(gpuBudget("a100", "6")),
			usage: []events.Usage{admitted("a100", "12")},
		},
		"unchanged while above": {
			old: teamSpec(gpuBudget("a100", "4")), spec: teamSpec(gpuBudget("a100", "4")),
			usage: []events.Usage{admitted("a100", "12")},
		},
		"nominal moved to borrowing": {
			old: teamSpec(gpuBudget("a100", "8")), spec: teamSpec(gpuBudget("a100", "4", "4")),
			usage: []events.Usage{admitted("a100", "8")},
		},
		"created": {
			spec:  teamSpec(gpuBudget("a100", "4")),
			usage: []events.Usage{admitted("a100", "12")},
		},
		"deleted": {
			old:   teamSpec(gpuBudget("a100", "8")),
			usage: []events.Usage{admitted("a100", "12")},
		},
		"other pair lowered": {
			old: teamSpec(gpuBudget("a100", "8"), gpuBudget("h100", "8")), spec: teamSpec(gpuBudget("a100", "8"), gpuBudget("h100", "2")),
			usage: []events.Usage{admitted("a100", "12"), admitted("h100", "1")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range LoweredBelowUsage(tc.old, tc.spec, tc.usage) {
				got = append(got, e.Message("team-beta"))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAboveBudgetCountsUnbudgetedPairs(t *testing.T) {
	got := AboveBudget(teamSpec(gpuBudget("a100", "8", "2")), []events.Usage{admitted("a100", "11"), admitted("h100", "2"), admitted("t4", "0")})
	want := []Excess{
		{Pair: Pair{"nvidia.com/gpu", "a100"}, Admitted: 11000, Nominal: 8000, BorrowingLimit: 2000, Budget: 10000, Above: 1000, Budgeted: true},
		{Pair: Pair{"nvidia.com/gpu", "h100"}, Admitted: 2000, Above: 2000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
