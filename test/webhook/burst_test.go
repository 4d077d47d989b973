package webhook

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/state"
)

// TestFiftyClientsAtOnce: 50 clients write at the same moment through two
// replicas behind a balancer, as a GitOps sync or a CI matrix does (issue
// 40, case 7). Every write needs a reservation (each one raises what its
// Cohort's children hold), none breaks a rule with the others: 50 creates
// of a team, then 50 raises of those teams. All are admitted, none
// refused with "retry": a write near more than three in-flight writes of
// the other replica (state.MaxUncertain), all creates or raises of teams,
// is judged on the combination that bounds the others
// (state.AdmitDominated) rather than refused when they do not land within
// the webhook's patience. The balancer holds the creates so that this
// happens on any machine (burstGate), and the test requires that this
// path ran (ome_quota_webhook_bound_total). (Each client
// would send its write again on "retry", as a GitOps tool does; the
// refusals are counted, and must be none.) Then 50 creates that cannot
// all fit (3 GPUs each under a Cohort of 100): at most 33 are stored,
// every other one is refused, and the stored tree breaks no rule.
func TestFiftyClientsAtOnce(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	lb := freePort(t)
	installConfig(t, lb)
	r1 := startReplica(t, "burst-1", freePort(t))
	r2 := startReplica(t, "burst-2", freePort(t))
	b := startBalancer(t, lb, [2]int{r1.port, r2.port})
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "burst-") })

	const clients = 50
	// all runs write(i) for every client at once and returns their errors.
	all := func(write func(i int) error) []error {
		errs := make([]error, clients)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = write(i)
			}()
		}
		close(start)
		wg.Wait()
		return errs
	}
	_, err = aqs.Create(ctx, aqtest.Cohort("burst-ok", "root").Budget(gpu, "a100", "100").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aqs.Create(ctx, aqtest.Cohort("burst-full", "root").Budget(gpu, "a100", "100").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	// untilAdmitted sends w again while the webhook says to retry
	// (retried), counting those refusals in refused.
	var refused atomic.Int64
	untilAdmitted := func(w func() error) error {
		return retried(ctx, func(context.Context) error {
			err := w()
			if isRetry(err) && refused.Add(1) <= 3 {
				t.Logf("refused with retry: %v", err)
			}
			return err
		})
	}
	// The creates go through a gate: the first replica judges them beside
	// at least four of the second's reservations whose writes have not
	// landed, on a fast machine as on a slow one.
	opened := b.holdBurst(state.MaxUncertain + 1)
	for i, err := range all(func(i int) error {
		return untilAdmitted(func() error {
			_, err := aqs.Create(ctx, aqtest.Team(fmt.Sprintf("burst-ok-%02d", i), "burst-ok").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
			return err
		})
	}) {
		require.NoError(t, err, "client %d's create of a team that fits", i)
	}
	opened()
	require.Zero(t, refused.Swap(0), "creates that fit were refused with retry")
	for i, err := range all(func(i int) error {
		return untilAdmitted(func() error {
			_, err := aqs.Patch(ctx, fmt.Sprintf("burst-ok-%02d", i), types.MergePatchType,
				[]byte(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"2"}]}}`), metav1.PatchOptions{})
			return err
		})
	}) {
		require.NoError(t, err, "client %d's raise of a team that fits", i)
	}
	require.Zero(t, refused.Load(), "raises that fit were refused with retry")
	bound := 0.0
	for _, r := range []*replica{r1, r2} {
		require.Positive(t, r.metric(t, "ome_quota_webhook_ledger_total", `outcome="reserved"`), "%s reserved nothing: the burst was not judged there", r.Name)
		bound += r.metric(t, "ome_quota_webhook_bound_total", `outcome="admitted"`)
	}
	require.Positive(t, bound, "no write was judged beside more than three reservations of the other replica: the burst did not try the bound")
	require.Positive(t, b.sent[0].Load())
	require.Positive(t, b.sent[1].Load())

	stored := 0
	for i, err := range all(func(i int) error {
		_, err := aqs.Create(ctx, aqtest.Team(fmt.Sprintf("burst-full-%02d", i), "burst-full").Budget(gpu, "a100", "3").Obj(), metav1.CreateOptions{})
		return err
	}) {
		switch {
		case err == nil:
			stored++
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "burst-full"):
		case isRetry(err):
		default:
			t.Errorf("client %d's create under a full Cohort: %v, want admitted, denied by the Cohort's rule, or retry", i, err)
		}
	}
	t.Logf("conflicting creates stored: %d of %d (at most 33 fit)", stored, clients)
	require.Positive(t, stored, "no conflicting create was admitted")
	require.LessOrEqual(t, stored, 33)
	require.Empty(t, storedViolations(t, aqs, "burst-"), "the stored tree breaks rules")
	for _, r := range []*replica{r1, r2} {
		t.Logf("%s: %v reviews, %v compare-and-swaps lost and judged again, %v judged beside writes not yet seen to land, %v of them on the bound of more than three", r.Name,
			r.metric(t, "ome_quota_webhook_review_seconds_count"), r.metric(t, "ome_quota_webhook_ledger_total", `outcome="conflict"`),
			r.metric(t, "ome_quota_webhook_uncertain_total"), r.metric(t, "ome_quota_webhook_bound_total"))
	}
}
