package kueue

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueueac "sigs.k8s.io/kueue/client-go/applyconfiguration/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/test/testutil"
)

// clock is a time the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// refusedCQ is a ClusterQueue that Kueue's webhook refuses whatever the
// number of attempts: it lends more than its nominal quota.
func refusedCQ(name string, lend int64) *kueueac.ClusterQueueApplyConfiguration {
	return kueueac.ClusterQueue(name).
		WithLabels(map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}).
		WithSpec(kueueac.ClusterQueueSpec().WithCohortName("backoff-cohort").
			WithResourceGroups(kueueac.ResourceGroup().WithCoveredResources("nvidia.com/gpu").
				WithFlavors(kueueac.FlavorQuotas().WithName("a100").WithResources(
					kueueac.ResourceQuota().WithName("nvidia.com/gpu").
						WithNominalQuota(resource.MustParse("8")).
						WithLendingLimit(*resource.NewQuantity(lend, resource.DecimalSI))))))
}

// TestApplierBacksOffWritesKueueRefuses: a ClusterQueue that Kueue's own
// validation refuses is not sent again on every pass. It is retried after
// 2 s, 4 s, 8 s, ... up to 5 min, per object; Materialized says so; a
// changed desired object is sent at once, and one that Kueue takes ends
// the backoff.
func TestApplierBacksOffWritesKueueRefuses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listers := kueueListers(ctx, t)
	clk := &clock{t: time.Date(2026, 10, 5, 9, 0, 0, 0, time.UTC)}
	a := &apply.Applier{Kueue: cluster.Kueue, Metrics: metrics.New(), Workers: 2, Now: clk.Now, Listers: listers}
	out := func(lend int64) *projector.Output {
		return &projector.Output{Materialize: true, ClusterQueues: []*kueueac.ClusterQueueApplyConfiguration{refusedCQ("backoff-team", lend)}}
	}

	// Kueue's webhook answers once it is up: until then the refusal is
	// not Kueue's own.
	var res *apply.Result
	testutil.Eventually(t, 30*time.Second, func() string {
		res = a.ApplyObjects(ctx, out(16), apply.Pass{})
		if o := res.Outcomes["backoff-team"]; !strings.Contains(o.Message, "must be less than or equal to the nominalQuota") {
			return "first refusal: " + o.Message
		}
		return ""
	})
	require.Equal(t, 1, res.Writes)
	require.Empty(t, res.Errors, "a refusal for good is not an error the 2 s retry loop handles")
	o := res.Outcomes["backoff-team"]
	require.Equal(t, events.OutcomeFailed, o.Kind)
	require.Contains(t, o.Message, "retrying will not fix this, so the manager retries it with exponential backoff (every 2s now, at most every 5m0s) until the object changes: fix the cause")
	require.Equal(t, clk.Now().Add(2*time.Second), res.RetryAt)

	// Passes within the delay send nothing, and still report why.
	for range 3 {
		res = a.ApplyObjects(ctx, out(16), apply.Pass{})
		require.Equal(t, 0, res.Writes, "a pass inside the backoff sent the refused object again")
		require.Equal(t, o, res.Outcomes["backoff-team"])
	}
	// Each refusal doubles the delay, up to 5 minutes.
	for _, want := range []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute} {
		clk.Add(res.RetryAt.Sub(clk.Now()))
		res = a.ApplyObjects(ctx, out(16), apply.Pass{})
		require.Equal(t, 1, res.Writes, "the backoff ended, the object is sent again")
		require.Equal(t, clk.Now().Add(want), res.RetryAt)
		require.Contains(t, res.Outcomes["backoff-team"].Message, "every "+want.String()+" now")
	}

	// Another desired object is sent at once, and its own refusal starts
	// over at 2 s.
	res = a.ApplyObjects(ctx, out(12), apply.Pass{})
	require.Equal(t, 1, res.Writes)
	require.Equal(t, clk.Now().Add(2*time.Second), res.RetryAt)

	// One that Kueue takes ends the backoff.
	res = a.ApplyObjects(ctx, out(8), apply.Pass{})
	require.Equal(t, 1, res.Writes)
	require.Empty(t, res.Errors)
	require.Equal(t, events.OutcomeApplied, res.Outcomes["backoff-team"].Kind)
	require.True(t, res.RetryAt.IsZero())
	testutil.Eventually(t, 10*time.Second, func() string {
		if _, err := listers.ClusterQueues.Get("backoff-team"); err != nil {
			return err.Error()
		}
		return ""
	})
	require.NoError(t, cluster.Kueue.KueueV1beta2().ClusterQueues().Delete(ctx, "backoff-team", metav1.DeleteOptions{}))
}
