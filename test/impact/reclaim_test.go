package impact

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// team is one team of a random tree.
type team struct {
	name, parent string
	nominal      int64
	borrowing    *int64
	policy       kueue.ClusterQueuePreemption
}

func (tm team) limit() int64 {
	if tm.borrowing == nil {
		return tm.nominal
	}
	return tm.nominal + *tm.borrowing
}

func (tm team) yaml(flavor string) string {
	b := fmt.Sprintf(`apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: %s
spec:
  role: ClusterQueue
  parentRef:
    name: %s
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: %s
      nominal: "%d"
`, tm.name, tm.parent, flavor, tm.nominal)
	if tm.borrowing != nil {
		b += fmt.Sprintf("      borrowingLimit: \"%d\"\n", *tm.borrowing)
	}
	return b
}

func cohortYAML(name, parent, flavor string, nominal int64) string {
	return fmt.Sprintf(`apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: %s
spec:
  role: Cohort
  parentRef:
    name: %s
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: %s
      nominal: "%d"
`, name, parent, flavor, nominal)
}

// scenario is what one seed did, for the test's summary.
type scenario struct {
	seed                      uint64
	teams, jobs, claims       int
	above, preempted, waiting int
	// stopped: the plan stopped at a second preemption (0 or 1).
	stopped int
}

// TestPlanReclaimsAsKueueDoes checks the plan against Kueue over seeded
// random trees: a Cohort of 24 GPUs on a flavor of its own, maybe with a
// sub-Cohort, three or four teams with random nominal quotas, borrowing
// limits and preemption policies, and random Jobs (sizes, priorities)
// admitted among them. One team with admitted work is lowered below its
// usage, and another sometimes raised by as much. For each seed the plan
// must name, in Kueue's order, the Workloads above the lowered budget
// and write nothing; then, after the change is applied, each lender's
// claim is submitted as the plan simulated it, in its order, and the
// Workloads that Kueue preempts for each claim must be the ones the plan
// named for it, and the claims admitted or left waiting as it said.
func TestPlanReclaimsAsKueueDoes(t *testing.T) {
	priorityClasses(t)
	seeds := []uint64{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}
	if s := os.Getenv("OME_IMPACT_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(f, 10, 64)
			require.NoError(t, err, "OME_IMPACT_SEEDS")
			seeds = append(seeds, n)
		}
	}
	var done []scenario
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { done = append(done, reclaimScenario(t, seed)) })
	}
	preempting := 0
	for _, s := range done {
		t.Logf("seed %d: %d teams, %d Jobs admitted, %d above the lowered budget, %d claims, %d preempted, %d claims waiting, %d stopped at a second preemption",
			s.seed, s.teams, s.jobs, s.above, s.claims, s.preempted, s.waiting, s.stopped)
		if s.preempted > 0 {
			preempting++
		}
	}
	// The comparison says something only if Kueue preempted in most seeds.
	require.GreaterOrEqual(t, preempting, (len(seeds)+1)/2, "too few seeds made Kueue preempt anything")
}

func reclaimScenario(t *testing.T, seed uint64) scenario {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	sc := scenario{seed: seed}
	flavor := fmt.Sprintf("s%d", seed)
	selector := map[string]string{"pool": flavor}
	pool(t, flavor, 2, 16)

	// The tree: a group of 24, maybe a sub-Cohort of 12 holding the first
	// two teams.
	group, sub := flavor+"-group", ""
	docs := []string{cohortYAML(group, "root", flavor, 24)}
	if r.IntN(2) == 0 {
		sub = flavor + "-sub"
		docs = append(docs, cohortYAML(sub, group, flavor, 12))
	}
	n := 3 + r.IntN(2)
	var teams []team
	left := map[string]int64{group: 24, sub: 12}
	if sub != "" {
		left[group] -= 12
	}
	policies := []kueue.PreemptionPolicy{kueue.PreemptionPolicyAny, kueue.PreemptionPolicyAny, kueue.PreemptionPolicyLowerPriority, kueue.PreemptionPolicyLowerPriority, kueue.PreemptionPolicyNever}
	for i := range n {
		tm := team{name: fmt.Sprintf("%s-t%d", flavor, i+1), parent: group}
		if sub != "" && i < 2 {
			tm.parent = sub
		}
		tm.nominal = min(left[tm.parent], int64(2+r.IntN(7)))
		left[tm.parent] -= tm.nominal
		if r.IntN(3) > 0 {
			b := int64(r.IntN(9))
			tm.borrowing = &b
		}
		tm.policy = kueue.ClusterQueuePreemption{ReclaimWithinCohort: policies[r.IntN(len(policies))], WithinClusterQueue: kueue.PreemptionPolicyNever}
		if r.IntN(4) == 0 && tm.policy.ReclaimWithinCohort != kueue.PreemptionPolicyNever {
			// Kueue refuses borrowWithinCohort beside reclaimWithinCohort Never.
			tm.policy.BorrowWithinCohort = &kueue.BorrowWithinCohort{Policy: kueue.BorrowWithinCohortPolicyLowerPriority}
		}
		teams = append(teams, tm)
		docs = append(docs, tm.yaml(flavor))
	}
	sc.teams = len(teams)
	var described []string
	for _, tm := range teams {
		p := fmt.Sprintf("%s: reclaimWithinCohort %s", tm.name, tm.policy.ReclaimWithinCohort)
		if tm.policy.BorrowWithinCohort != nil {
			p += ", borrowWithinCohort " + string(tm.policy.BorrowWithinCohort.Policy)
		}
		described = append(described, p)
	}
	t.Logf("seed %d's tree:\n%s\npolicies:\n%s", seed, strings.Join(docs, "---\n"), strings.Join(described, "\n"))
	_, errOut, err := apply(t, strings.Join(docs, "---\n"))
	require.NoError(t, err, errOut)
	for _, tm := range teams {
		waitNominal(t, tm.name, flavor, tm.nominal)
		setPreemption(t, tm.name, tm.policy)
	}

	// Jobs: some teams borrow up to their limit, others use part of
	// their quota or none. A Job Kueue does not admit is removed, so that
	// nothing is pending when the change lands.
	want := map[string]int64{}
	borrower := r.IntN(len(teams))
	for i, tm := range teams {
		if i == borrower {
			want[tm.name] = tm.limit()
			continue
		}
		switch r.IntN(3) {
		case 0:
			want[tm.name] = tm.limit()
		case 1:
			want[tm.name] = int64(r.IntN(int(tm.nominal) + 1))
		}
	}
	classNames := []string{"p0", "p10", "p20"}
	var jobs []string
	for i := 0; len(want) > 0 && i < 40; i++ {
		names := slices.Sorted(mapsKeys(want))
		q := names[r.IntN(len(names))]
		size := min(want[q], int64(1+r.IntN(4)))
		if size <= 0 {
			delete(want, q)
			continue
		}
		job := fmt.Sprintf("%s-j%d", flavor, i)
		submit(t, job, q, classNames[r.IntN(3)], size, selector)
		ws := settle(t)
		if !ws[job].Admitted {
			remove(t, job)
			delete(want, q)
			continue
		}
		jobs = append(jobs, job)
		want[q] -= size
		if want[q] <= 0 {
			delete(want, q)
		}
	}
	// A later Job may have preempted an earlier one, which now waits:
	// nothing may be pending when the change lands.
	ws := settle(t)
	var kept []string
	for _, j := range jobs {
		if ws[j].Admitted {
			kept = append(kept, j)
		} else {
			remove(t, j)
		}
	}
	jobs = kept
	ws = settle(t)
	usage := map[string]int64{}
	for _, j := range jobs {
		usage[ws[j].Queue] += ws[j].GPUs
	}
	sc.jobs = len(jobs)
	var names []string
	for _, tm := range teams {
		names = append(names, tm.name)
	}
	waitUsage(t, flavor, ws, names...)

	// The change: lower a team with admitted work below its usage, and
	// sometimes give what it loses to a sibling.
	var victims []int
	for i, tm := range teams {
		if usage[tm.name] > 0 {
			victims = append(victims, i)
		}
	}
	require.NotEmpty(t, victims, "seed %d admitted nothing", seed)
	v := teams[victims[r.IntN(len(victims))]]
	lowered := v
	u := usage[v.name]
	lowered.nominal = int64(r.IntN(int(min(v.nominal, u-1)) + 1))
	if lowered.borrowing != nil && lowered.nominal+*lowered.borrowing >= u {
		b := u - 1 - lowered.nominal
		lowered.borrowing = &b
	}
	require.Less(t, lowered.limit(), u)
	change := []string{lowered.yaml(flavor)}
	for _, tm := range teams {
		if tm.name != v.name && tm.parent == v.parent && r.IntN(2) == 0 {
			raised := tm
			raised.nominal += v.nominal - lowered.nominal
			change = append(change, raised.yaml(flavor))
			break
		}
	}
	changeDoc := strings.Join(change, "---\n")
	file := filepath.Join(t.TempDir(), "change.yaml")
	require.NoError(t, os.WriteFile(file, []byte(changeDoc), 0o600))
	prio := []int32{0, 10, 20}[r.IntN(3)]
	args := []string{"-f", file, "--claim-priority", fmt.Sprint(prio)}
	size := []string{"", "", "1", "2"}[r.IntN(4)]
	if size != "" {
		args = append(args, "--claim-size", size)
	}
	t.Logf("seed %d: lowering %s from %d (limit %d) to %d (limit %d) with %d admitted; claims at priority %d, size %q\n%s",
		seed, v.name, v.nominal, v.limit(), lowered.nominal, lowered.limit(), u, prio, size, changeDoc)

	run := planWritesNothing(t, args...)
	require.Equal(t, 3, run.code, "%s\n%s", run.out, run.errOut)
	var state []string
	for _, j := range jobs {
		s := ws[j]
		state = append(state, fmt.Sprintf("%s %s: %s %d GPUs, priority %d, admitted %s, uid %s", j, s.Name, s.Queue, s.GPUs, s.Priority, s.Reserved.Format("15:04:05"), s.UID))
	}
	t.Logf("Jobs:\n%s\nthe plan:\n%s", strings.Join(state, "\n"), run.out)
	rep := run.report.Impact
	var above []string
	for _, e := range rep.AboveBudget {
		if e.Team == v.name {
			require.Equal(t, fmt.Sprint(u), e.Admitted)
			require.Equal(t, fmt.Sprint(u-lowered.limit()), e.Above)
			above = workloadJobs(ws, e.Workloads)
			var sum int64
			for _, w := range e.Workloads {
				q := resource.MustParse(strings.TrimPrefix(w.Usage, "nvidia.com/gpu@"+flavor+"="))
				require.Equal(t, ws[jobOfWorkload(ws, w.Name)].GPUs, q.Value(), "the amount of %s", w.Name)
				sum += q.Value()
			}
			require.GreaterOrEqual(t, sum, u-lowered.limit())
		}
	}
	require.Equal(t, aboveBudget(ws, v.name, lowered.limit()), above, "the Workloads above %s's budget", v.name)
	sc.above = len(above)
	require.Empty(t, rep.Admits, "nothing is pending, so nothing is admitted")

	// Apply the change: Kueue evicts nothing.
	_, errOut, err = apply(t, changeDoc)
	require.NoError(t, err, errOut)
	require.Contains(t, errOut, "Warning: "+v.name+": admitted nvidia.com/gpu on "+flavor)
	require.Equal(t, 1, strings.Count(errOut, "Warning: "), errOut)
	waitNominal(t, lowered.name, flavor, lowered.nominal)
	for _, doc := range change[1:] {
		for _, tm := range teams {
			if strings.Contains(doc, "name: "+tm.name+"\n") {
				waitNominal(t, tm.name, flavor, tm.nominal+v.nominal-lowered.nominal)
			}
		}
	}
	cur := settle(t)
	for _, j := range jobs {
		require.True(t, cur[j].Admitted, "Kueue evicted %s when the quota changed", j)
	}

	// The lenders' claims, one after another as the plan simulated them.
	class := map[int32]string{0: "p0", 10: "p10", 20: "p20"}[prio]
	// A preempted Workload goes back to its queue, and the plan takes it
	// as admitted again as soon as room frees; Kueue's own requeueing
	// decides when it is. The plan stops at a claim that would preempt
	// such a Workload again (StoppedAt), and says so: everything it
	// names up to there is compared.
claims:
	for ci, c := range rep.Claims {
		amount := resource.MustParse(c.Amount)
		step := amount.Value()
		if c.Size != "" {
			q := resource.MustParse(c.Size)
			step = q.Value()
		}
		var admitted int64
		for k, rest := 1, amount.Value(); rest > 0; k++ {
			piece := min(step, rest)
			rest -= piece
			if k == c.StoppedAt {
				require.NotEmpty(t, c.Unsure)
				require.Equal(t, ci, len(rep.Claims)-1, "no claim is listed after the plan stopped")
				require.Equal(t, c.Admitted, fmt.Sprint(admitted), "what Kueue admitted of %s's claim before the plan stopped", c.Team)
				t.Logf("claim %d of %s: %s", k, c.Team, c.Unsure)
				sc.stopped++
				break claims
			}
			job := fmt.Sprintf("%s-claim%d-%d", flavor, ci+1, k)
			before := settle(t)
			submit(t, job, c.Team, class, piece, selector)
			after := settle(t)
			got := sortedJobs(after, func(j string, s wl) bool { return s.Preempted > before[j].Preempted })
			var named []string
			for _, w := range c.Preempts {
				if w.Claim == k {
					named = append(named, jobOfWorkload(ws, w.Name))
				}
			}
			require.ElementsMatch(t, named, got, "claim %d of %s (%d of %s): the plan named %v, Kueue preempted %v", k, c.Team, piece, c.Amount, named, got)
			sc.preempted += len(got)
			if !after[job].Admitted {
				require.NotEmpty(t, c.Waits, "Kueue left claim %d of %s waiting, the plan said it is admitted", k, c.Team)
				sc.waiting++
				remove(t, job)
				break
			}
			admitted += piece
		}
		require.Equal(t, c.Admitted, fmt.Sprint(admitted), "what Kueue admitted of %s's claim", c.Team)
		sc.claims++
	}
	final := settle(t)
	for _, s := range rep.NotReclaimed {
		j := jobOfWorkload(ws, s.Workload.Name)
		require.Equal(t, ws[j].Preempted, final[j].Preempted, "%s was preempted, the plan said it would not be: %s", j, s.Why)
	}
	return sc
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
