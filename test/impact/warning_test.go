package impact

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/quotactl"
)

// validateCode is kubectl ome quota validate's exit status on doc: the
// rule book's verdict, which knows nothing of warnings.
func validateCode(t *testing.T, doc string) int {
	t.Helper()
	f := filepath.Join(t.TempDir(), "doc.yaml")
	require.NoError(t, os.WriteFile(f, []byte(doc), 0o600))
	var out, errOut strings.Builder
	return quotactl.Run([]string{"quota", "validate", "-f", f, "--kubeconfig", cluster.Kubeconfig},
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
}

// TestWebhookWarnsOfLoweringBelowUsage applies writes to a team holding 10
// GPUs (nominal 8, borrowing up to 4) with kubectl, as server dry runs
// and once for real: kubectl prints the webhook's warning for the two
// lowerings below 10, of the nominal and of the borrowing limit, and for
// nothing else: not a lowering that still covers the 10, a raise, a label,
// a denied write, another team's lowering, a deletion. Each write is
// admitted exactly when validate, which has no warnings, says the rule
// book keeps: the warning changes no verdict.
func TestWebhookWarnsOfLoweringBelowUsage(t *testing.T) {
	priorityClasses(t)
	const flavor = "warn"
	selector := map[string]string{"pool": flavor}
	pool(t, flavor, 2, 16)
	policy := kueue.ClusterQueuePreemption{ReclaimWithinCohort: kueue.PreemptionPolicyNever, WithinClusterQueue: kueue.PreemptionPolicyNever}
	four := int64(4)
	busy := team{name: "warn-busy", parent: "warn-group", nominal: 8, borrowing: &four, policy: policy}
	idle := team{name: "warn-idle", parent: "warn-group", nominal: 8, borrowing: new(int64), policy: policy}
	_, errOut, err := apply(t, strings.Join([]string{cohortYAML("warn-group", "root", flavor, 16), busy.yaml(flavor), idle.yaml(flavor)}, "---\n"))
	require.NoError(t, err, errOut)
	waitNominal(t, busy.name, flavor, 8)
	waitNominal(t, idle.name, flavor, 8)
	for i, g := range []int64{4, 4, 2} {
		submit(t, "warn-job-"+string(rune('1'+i)), busy.name, "p0", g, selector)
		settle(t)
	}
	ws := settle(t)
	waitUsage(t, flavor, ws, busy.name, idle.name)

	with := func(tm team, nominal int64, borrowing *int64) string {
		tm.nominal, tm.borrowing = nominal, borrowing
		return tm.yaml(flavor)
	}
	one, six := int64(1), int64(6)
	labelled := strings.Replace(busy.yaml(flavor), "metadata:\n", "metadata:\n  labels:\n    team: busy\n", 1)
	cases := []struct {
		name, doc string
		delete    bool
		warn      string
	}{
		{name: "nominal lowered below usage", doc: with(busy, 4, &four), warn: "Warning: warn-busy: admitted nvidia.com/gpu on warn is 10, 2 above its budget of 8 (nominal 4 + borrowingLimit 4)"},
		{name: "borrowing limit lowered below usage", doc: with(busy, 8, &one), warn: "Warning: warn-busy: admitted nvidia.com/gpu on warn is 10, 1 above its budget of 9 (nominal 8 + borrowingLimit 1)"},
		{name: "nominal lowered, usage still covered", doc: with(busy, 6, &four)},
		{name: "borrowing limit raised", doc: with(busy, 8, &six)},
		{name: "a label", doc: labelled},
		{name: "raised past the group (denied)", doc: with(busy, 12, &four)},
		{name: "the idle team lowered", doc: with(idle, 2, new(int64))},
		{name: "the idle team deleted", doc: idle.yaml(flavor), delete: true},
	}
	warned := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "change.yaml")
			require.NoError(t, os.WriteFile(f, []byte(tc.doc), 0o600))
			verb := []string{"apply", "-f", f, "--dry-run=server"}
			if tc.delete {
				verb = []string{"delete", "-f", f, "--dry-run=server"}
			}
			out, errOut, err := cluster.KubectlOutput(t.Context(), verb...)
			if tc.delete {
				require.NoError(t, err, errOut)
			} else {
				// Admitted exactly when the rule book, warnings aside,
				// keeps every rule.
				require.Equal(t, validateCode(t, tc.doc) == 0, err == nil, "kubectl: %v\n%s%s", err, out, errOut)
			}
			if tc.warn == "" {
				require.NotContains(t, out+errOut, "above its budget", "kubectl printed\n%s%s", out, errOut)
				return
			}
			require.Contains(t, errOut, tc.warn)
			require.Contains(t, errOut, "kubectl ome quota plan names them")
			require.Equal(t, 1, strings.Count(errOut, "Warning: "), errOut)
			warned++
		})
	}
	require.Equal(t, 2, warned)

	// For real: the same warning, and the write lands.
	out, errOut, err := apply(t, with(busy, 4, &four))
	require.NoError(t, err, errOut)
	require.Contains(t, out, "acceleratorquota.ome.io/warn-busy configured")
	require.Contains(t, errOut, "Warning: warn-busy: admitted nvidia.com/gpu on warn is 10, 2 above its budget of 8")
	waitNominal(t, busy.name, flavor, 4)
}
