package kueue

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kueueac "sigs.k8s.io/kueue/client-go/applyconfiguration/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/test/testutil"
)

// countingKueue is a Kueue client on the test's apiserver that counts the
// writes it sends.
func countingKueue(t *testing.T, writes *atomic.Int64) kueueclient.Interface {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet {
				writes.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := kueueclient.NewForConfig(cfg)
	require.NoError(t, err)
	return c
}

// kueueListers starts Kueue caches until ctx is done and returns listers
// on them, with no AcceleratorQuota.
func kueueListers(ctx context.Context, t *testing.T) apply.Listers {
	f := kueueinformers.NewSharedInformerFactory(cluster.Kueue, 0)
	kq := f.Kueue().V1beta2()
	listers := apply.Listers{Cohorts: kq.Cohorts().Lister(), ClusterQueues: kq.ClusterQueues().Lister(), LocalQueues: kq.LocalQueues().Lister(),
		AQ: func(string) *v1beta1.AcceleratorQuota { return nil }}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "%v cache", typ)
	}
	return listers
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestApplierUrgentClient: a write of a Pass marked Urgent goes through
// UrgentKueue (the client with the urgent lane of the manager's rate
// limiter), any other through Kueue.
func TestApplierUrgentClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listers := kueueListers(ctx, t)
	var bulk, urgent atomic.Int64
	a := &apply.Applier{Kueue: countingKueue(t, &bulk), UrgentKueue: countingKueue(t, &urgent), Metrics: metrics.New(), Workers: 2, Now: time.Now, Listers: listers}
	out := func(lend int64) *projector.Output {
		return &projector.Output{Materialize: true, ClusterQueues: []*kueueac.ClusterQueueApplyConfiguration{refusedCQ("urgent-team", lend)}}
	}
	// Kueue's webhook may not answer yet: retry until the write is in
	// place. A try whose answer was lost may have landed, so the next one
	// finds the object written and sends nothing: landed is what counts.
	testutil.Eventually(t, 30*time.Second, func() string {
		return landed(ctx, a.ApplyObjects(ctx, out(4), apply.Pass{Urgent: true}), 4)
	})
	require.Positive(t, urgent.Load(), "the urgent write went through the urgent client")
	require.Zero(t, bulk.Load(), "the urgent write went through the bulk client")

	before := urgent.Load()
	testutil.Eventually(t, 30*time.Second, func() string {
		return landed(ctx, a.ApplyObjects(ctx, out(2), apply.Pass{}), 2)
	})
	require.Positive(t, bulk.Load(), "the bulk write went through the bulk client")
	require.Equal(t, before, urgent.Load(), "the bulk write went through the urgent client")
	require.NoError(t, cluster.Kueue.KueueV1beta2().ClusterQueues().Delete(ctx, "urgent-team", metav1.DeleteOptions{}))
}

// landed says why urgent-team is not yet written with lending limit lend
// after a pass that returned res, or "" once it is.
func landed(ctx context.Context, res *apply.Result, lend int64) string {
	if o := res.Outcomes["urgent-team"]; o.Kind != events.OutcomeApplied || len(res.Errors) > 0 {
		return fmt.Sprintf("pass: %d writes, errors %v, outcome %s %q", res.Writes, res.Errors, o.Kind, o.Message)
	}
	cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "urgent-team", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if got := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].LendingLimit; got == nil || got.Value() != lend {
		return fmt.Sprintf("lending limit %v, want %d", got, lend)
	}
	return ""
}
