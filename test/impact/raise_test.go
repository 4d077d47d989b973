package impact

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/test/testutil"
)

// TestPlanRaiseAdmitsPending raises a team whose Jobs wait for quota: the
// plan names the pending Workloads the raise lets in, in the order Kueue
// admits them, and not the one still too big; it exits 0, as no admitted
// Workload is affected; and once the raise is applied Kueue admits
// exactly those.
func TestPlanRaiseAdmitsPending(t *testing.T) {
	priorityClasses(t)
	const flavor = "raise"
	selector := map[string]string{"pool": flavor}
	pool(t, flavor, 2, 16)
	t1 := team{name: "raise-t1", parent: "raise-group", nominal: 4, borrowing: new(int64),
		policy: kueue.ClusterQueuePreemption{ReclaimWithinCohort: kueue.PreemptionPolicyAny, WithinClusterQueue: kueue.PreemptionPolicyNever}}
	t2 := team{name: "raise-t2", parent: "raise-group", nominal: 8, borrowing: new(int64), policy: t1.policy}
	_, errOut, err := apply(t, strings.Join([]string{cohortYAML("raise-group", "root", flavor, 16), t1.yaml(flavor), t2.yaml(flavor)}, "---\n"))
	require.NoError(t, err, errOut)
	for _, tm := range []team{t1, t2} {
		waitNominal(t, tm.name, flavor, tm.nominal)
		setPreemption(t, tm.name, tm.policy)
	}
	// raise-t1 runs 4 GPUs; three Jobs wait: 2 at priority 0, 2 at
	// priority 10, and 6, which even the raise does not fit.
	for _, j := range []struct {
		name, class string
		gpus        int64
	}{{"raise-run-1", "p0", 2}, {"raise-run-2", "p0", 2}, {"raise-wait-low", "p0", 2}, {"raise-wait-high", "p10", 2}, {"raise-wait-big", "p0", 6}} {
		submit(t, j.name, t1.name, j.class, j.gpus, selector)
		settle(t)
	}
	ws := settle(t)
	require.True(t, ws["raise-run-1"].Admitted && ws["raise-run-2"].Admitted, "%+v", ws)
	for _, j := range []string{"raise-wait-low", "raise-wait-high", "raise-wait-big"} {
		require.False(t, ws[j].Admitted, "%s was admitted before the raise", j)
	}
	waitUsage(t, flavor, ws, t1.name, t2.name)

	raised := t1
	raised.nominal = 8
	file := filepath.Join(t.TempDir(), "raise.yaml")
	require.NoError(t, os.WriteFile(file, []byte(raised.yaml(flavor)), 0o600))
	run := planWritesNothing(t, "-f", file)
	require.Equal(t, 0, run.code, "%s\n%s", run.out, run.errOut)
	var named []string
	for _, a := range run.report.Impact.Admits {
		require.Empty(t, a.Preempts)
		named = append(named, jobOfWorkload(ws, a.Workload.Name))
	}
	require.Equal(t, []string{"raise-wait-high", "raise-wait-low"}, named, "the pending Workloads the plan names")
	text := plan(t, true, "-f", file)
	require.Equal(t, 0, text.code)
	require.Contains(t, text.out, "Pending Workloads that Kueue admits after the change:")
	require.Contains(t, text.out, "the change keeps every rule and affects no admitted Workload")

	_, errOut, err = apply(t, raised.yaml(flavor))
	require.NoError(t, err, errOut)
	require.NotContains(t, errOut, "Warning:")
	waitNominal(t, t1.name, flavor, 8)
	// Kueue takes its waiting Workloads back into the queue when the
	// quota changes: wait for those named, then for Kueue to be done.
	testutil.Eventually(t, 60*time.Second, func() string {
		cur := workloads(t)
		for _, j := range named {
			if !cur[j].Admitted {
				return j + " is not admitted yet"
			}
		}
		return ""
	})
	after := settle(t)
	admitted := sortedJobs(after, func(j string, s wl) bool { return strings.HasPrefix(j, "raise-wait-") && s.Admitted })
	require.ElementsMatch(t, named, admitted, "the plan named %v, Kueue admitted %v", named, admitted)
	for _, j := range []string{"raise-run-1", "raise-run-2"} {
		require.True(t, after[j].Admitted && after[j].Preempted == ws[j].Preempted, "%s was disturbed", j)
	}
}
