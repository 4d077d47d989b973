package webhook

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/webhook"
)

// TestNeverLandingCreate: a CREATE review posted straight to the webhook
// port, with no credentials, is admitted and reserved, and its write never
// comes (issue 40, case 3). Raises of a team under the same Cohort, which
// fit whether or not that create lands, are then each judged on both
// outcomes (ome_quota_webhook_uncertain_total) and admitted while its
// reservation is still in the ledger, none of them waiting for it to
// settle (ome_quota_webhook_waits_total{for="settle"} stays where it was),
// let alone to expire (75 s). Their times, before and beside it, are
// logged for the report; TestNoWaitWhenEveryOutcomeAdmits in package
// webhook shows the same on a stopped clock.
func TestNeverLandingCreate(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	r := startReplica(t, "phantom", port)
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "phantom") })
	_, err = aqs.Create(ctx, aqtest.Cohort("phantom", "root").Budget(gpu, "a100", "100").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aqs.Create(ctx, aqtest.Team("phantom-a", "phantom").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	// raises sets phantom-a's budget to from, from+1, ... (n writes) and
	// returns each one's time, sorted.
	raises := func(from, n int) []time.Duration {
		var took []time.Duration
		for v := from; v < from+n; v++ {
			start := time.Now()
			_, err := aqs.Patch(ctx, "phantom-a", types.MergePatchType,
				[]byte(fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, v)), metav1.PatchOptions{})
			require.NoError(t, err, "raise to %d", v)
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took
	}
	quiet := raises(2, 10)

	code, body, err := newPoster(t, port).post(ctx, webhook.Path, review("CREATE", "phantom-ghost", "mallory",
		aqJSON("phantom-ghost", "ghost-uid", "", `{"role":"ClusterQueue","parentRef":{"name":"phantom"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"5"}]}`), ""), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"allowed":true`, "the forged create was not admitted: the test proves nothing")
	ghost := func() bool { return len(reservationsOf(t, "phantom-ghost")) > 0 }
	require.True(t, ghost(), "the forged create reserved nothing")
	// Until it expires, the reservation keeps the Cohort from being
	// deleted (the create could still land under it): the cleanup takes
	// it out of the ledger, as an admin who knows it was forged may.
	t.Cleanup(func() { dropReservations(t, "phantom-ghost") })

	uncertain := r.metric(t, "ome_quota_webhook_uncertain_total")
	settle := r.metric(t, "ome_quota_webhook_waits_total", `for="settle"`)
	near := raises(12, 10)
	require.GreaterOrEqual(t, r.metric(t, "ome_quota_webhook_uncertain_total")-uncertain, 10.0,
		"the raises were not judged on the forged create's outcomes")
	require.Zero(t, r.metric(t, "ome_quota_webhook_waits_total", `for="settle"`)-settle,
		"a raise waited for the forged create to settle instead of being answered on both outcomes")
	require.True(t, ghost(), "the forged create's reservation left the ledger before the raises ended")
	t.Logf("raises of a team: p50 %v, max %v quiet; p50 %v, max %v beside a create that never lands",
		quiet[len(quiet)/2], quiet[len(quiet)-1], near[len(near)/2], near[len(near)-1])
	_, err = aqs.Get(ctx, "phantom-ghost", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the forged create was stored: %v", err)
}
