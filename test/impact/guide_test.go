package impact

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/impact"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
	"ome.io/quota-manager/test/testutil/golden"
)

// guideChange is the guide's tree with team-beta lowered to 4 (still
// borrowing up to 4) and team-alpha raised to 20: the 4 GPUs move from
// beta to alpha. Beta comes first, as ml-research's children may not
// total more than its 24 after any one write.
const guideChange = `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: team-beta
spec:
  role: ClusterQueue
  parentRef:
    name: ml-research
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "4"
      borrowingLimit: "4"
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: team-alpha
spec:
  role: ClusterQueue
  parentRef:
    name: ml-research
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "20"
`

// aboveBudget is the oracle of the Workloads above a limit, written from
// Kueue's documented preemption order: lower priority first, then the
// most recently admitted, then uid; taken until the rest fits, then each
// one the rest fits without given back, last taken first.
func aboveBudget(ws map[string]wl, queue string, limit int64) []string {
	var mine []string
	var used int64
	for j, s := range ws {
		if s.Admitted && s.Queue == queue {
			mine = append(mine, j)
			used += s.GPUs
		}
	}
	slices.SortFunc(mine, func(a, b string) int {
		x, y := ws[a], ws[b]
		return cmp.Or(cmp.Compare(x.Priority, y.Priority), y.Reserved.Compare(x.Reserved), cmp.Compare(x.UID, y.UID))
	})
	var taken []string
	for _, j := range mine {
		if used <= limit {
			break
		}
		taken = append(taken, j)
		used -= ws[j].GPUs
	}
	for i := len(taken) - 2; i >= 0; i-- {
		if used+ws[taken[i]].GPUs <= limit {
			used += ws[taken[i]].GPUs
			taken = slices.Delete(taken, i, i+1)
		}
	}
	return taken
}

func workloadJobs(ws map[string]wl, list []impact.Workload) []string {
	var out []string
	for _, w := range list {
		out = append(out, jobOfWorkload(ws, w.Name))
	}
	return out
}

// TestPlanOnTheGuide walks the guide's tree: team-beta holds 12 GPUs in
// six Jobs of 2 (the last two at priority 10) while team-alpha idles. The
// plan of moving 4 GPUs from beta to alpha names the two Jobs above
// beta's new budget of 8, in Kueue's order, with their amounts, and
// writes nothing. Once the change is applied, Kueue evicts nothing, and
// when team-alpha's work claims its 20 GPUs, Kueue preempts exactly the
// Jobs the plan named for that claim.
func TestPlanOnTheGuide(t *testing.T) {
	priorityClasses(t)
	testutil.GuideCluster(t, cluster)
	_, errOut, err := apply(t, mustRead(t, "../../config/samples/quota-tree.yaml"))
	require.NoError(t, err, errOut)
	waitNominal(t, "team-alpha", "a100", 16)
	waitNominal(t, "team-beta", "a100", 8)
	for _, q := range []string{"team-alpha", "team-beta"} {
		setPreemption(t, q, kueue.ClusterQueuePreemption{ReclaimWithinCohort: kueue.PreemptionPolicyAny, WithinClusterQueue: kueue.PreemptionPolicyNever})
	}
	for i := 1; i <= 6; i++ {
		class := "p0"
		if i > 4 {
			class = "p10"
		}
		// Each admitted in a second of its own, so that the order by
		// admission time, and the output below, do not hang on uids.
		testutil.NextSecond(t)
		submit(t, fmt.Sprintf("beta-%d", i), "team-beta", class, 2, localcluster.A100Labels)
		settle(t)
	}
	ws := settle(t)
	require.Len(t, sortedJobs(ws, func(_ string, s wl) bool { return s.Admitted }), 6, "%v", ws)
	waitUsage(t, "a100", ws, "team-alpha", "team-beta")

	change := filepath.Join(t.TempDir(), "change.yaml")
	require.NoError(t, os.WriteFile(change, []byte(guideChange), 0o600))
	r := planWritesNothing(t, "-f", change)
	require.Equal(t, 3, r.code, "%s\n%s", r.out, r.errOut)
	rep := r.report.Impact
	require.Len(t, rep.AboveBudget, 1)
	ex := rep.AboveBudget[0]
	require.Equal(t, []string{"team-beta", "12", "8", "4"}, []string{ex.Team, ex.Admitted, ex.Budget, ex.Above})
	require.Equal(t, aboveBudget(ws, "team-beta", 8), workloadJobs(ws, ex.Workloads))
	for _, w := range ex.Workloads {
		require.Equal(t, "nvidia.com/gpu@a100=2", w.Usage)
	}
	// One claim, team-alpha's 20, which preempts.
	require.Len(t, rep.Claims, 1, "%+v", rep.Claims)
	claim := rep.Claims[0]
	require.Equal(t, []string{"team-alpha", "20", "20"}, []string{claim.Team, claim.Amount, claim.Admitted})
	require.NotEmpty(t, claim.Preempts)

	text := plan(t, true, "-f", change)
	require.Equal(t, 3, text.code)
	golden.Check(t, "plan-guide.txt", normalize(text.out))
	t.Logf("kubectl ome quota plan -f change.yaml printed:\n%s", text.out)

	out, errOut, err := apply(t, guideChange)
	require.NoError(t, err, errOut)
	require.Contains(t, errOut, "Warning: team-beta: admitted nvidia.com/gpu on a100 is 12, 4 above its budget of 8 (nominal 4 + borrowingLimit 4)")
	t.Logf("kubectl apply -f change.yaml printed:\n%s%s", errOut, out)
	waitNominal(t, "team-beta", "a100", 4)
	waitNominal(t, "team-alpha", "a100", 20)
	applied := settle(t)
	for j, s := range applied {
		require.True(t, s.Admitted, "Kueue evicted %s when the quota dropped", j)
	}

	submit(t, "alpha-claim", "team-alpha", "p0", 20, localcluster.A100Labels)
	after := settle(t)
	preempted := sortedJobs(after, func(j string, s wl) bool { return s.Preempted > applied[j].Preempted })
	want := workloadJobs(ws, claim.Preempts)
	require.ElementsMatch(t, want, preempted, "the plan named %v, Kueue preempted %v", want, preempted)
	require.True(t, after["alpha-claim"].Admitted, "team-alpha's claim was not admitted")
	t.Logf("above budget: %v; team-alpha's claim preempted %v", workloadJobs(ws, ex.Workloads), want)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
