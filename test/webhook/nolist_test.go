package webhook

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/testutil/promtext"
)

// apiserverCount sums the kube-apiserver's apiserver_request_total series
// whose labels include every one of match.
func apiserverCount(t *testing.T, match ...string) float64 {
	t.Helper()
	raw, err := cluster.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	f, err := promtext.ParseString(string(raw))
	require.NoError(t, err)
	return f.Sum("apiserver_request_total", match...)
}

// TestReviewsListNothing: 500 budget updates judged by the webhook send no
// LIST of AcceleratorQuotas to the API server; the webhook judges from the
// manager's state. A LIST sent by the test first shows that the counter
// counts.
func TestReviewsListNothing(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	r := startReplica(t, "nolist", port)
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "nolist") })
	_, err = aqs.Create(ctx, aqtest.Cohort("nolist", "root").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aqs.Create(ctx, aqtest.Team("nolist-team", "nolist").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	lists := func() float64 { return apiserverCount(t, `resource="acceleratorquotas"`, `verb="LIST"`) }
	before := lists()
	_, err = aqs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, before+1, lists(), "the apiserver's counter did not count the test's own LIST")

	updates := func() float64 {
		return r.metric(t, "ome_quota_webhook_verdicts_total", `operation="UPDATE"`, `verdict="allowed"`)
	}
	judged, before := updates(), lists()
	const reviews = 500
	for i := range reviews {
		p := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, 1+i%2)
		_, err := aqs.Patch(ctx, "nolist-team", types.MergePatchType, []byte(p), metav1.PatchOptions{})
		require.NoError(t, err, "update %d", i)
	}
	require.GreaterOrEqual(t, updates()-judged, float64(reviews), "the webhook did not judge every update")
	require.Equal(t, before, lists(), "reviews sent LISTs of AcceleratorQuotas")
}
