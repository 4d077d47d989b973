package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/webhook"
)

// TestNoCheapStall: with client certificates off (the chart's default),
// a caller who reaches the webhook port without credentials can have
// writes reserved that never land, and can name versions the replica has
// not seen. Neither stalls the genuine writes beside them.
//
//  1. Four forged reservations near a Cohort (an empty Cohort's create,
//     two teams' creates and a team's delete, each admitted and reserved)
//     stay in the ledger. Genuine raises, creates and deletes under that
//     Cohort, through the API server, are each admitted at once: none is
//     refused with "retry", none waits for the forged ones to settle
//     (ome_quota_webhook_waits_total{for="settle"}), each is judged on the
//     bound of the reservations beside it (ome_quota_webhook_bound_total).
//  2. Then, for 20 s, 32 forged UPDATEs at a time name bases just ahead of
//     the object (its version, read every 200 ms, plus 1 to 3), and far
//     ahead, each asking for an hour (?timeout=3600s). Each is answered
//     within the webhook's own timeout (3 s here): every refusal falls in
//     the review histogram's bucket at 3.28 s, and none lands. Asking the
//     API server how far an object is counts as a wait: at most a quarter
//     of the slots ever wait (ome_quota_webhook_waiting, sampled), so the
//     genuine writes beside them keep being answered and admitted (one
//     that needs a waiting slot while they are all taken is refused with
//     "retry" and sent again; how often is logged).
func TestNoCheapStall(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	r := startReplica(t, "stall", port, "--webhook-timeout=3s")
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() {
		dropReservations(t, "stall-ghost")
		deleteByPrefix(t, aqs, "stall")
	})
	_, err = aqs.Create(ctx, aqtest.Cohort("stall", "root").Budget(gpu, "a100", "30").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	var teams []*v1beta1.AcceleratorQuota
	for _, n := range []string{"stall-a", "stall-b", "stall-c"} {
		aq, err := aqs.Create(ctx, aqtest.Team(n, "stall").Budget(gpu, "a100", "2").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		teams = append(teams, aq)
	}

	// 1. Four forged reservations near the Cohort. The delete names
	// stall-c's version once its status is written: a reserved delete
	// settles when its object moves past the base.
	p := newPoster(t, port)
	team := func(parent, n string) string {
		return fmt.Sprintf(`{"role":"ClusterQueue","parentRef":{"name":%q},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":%q}]}`, parent, n)
	}
	var c *v1beta1.AcceleratorQuota
	eventually(t, time.Minute, func() string {
		c, err = aqs.Get(ctx, teams[2].Name, metav1.GetOptions{})
		require.NoError(t, err)
		if !meta.IsStatusConditionTrue(c.Status.Conditions, v1beta1.ConditionReady) {
			return "stall-c is not Ready yet"
		}
		return ""
	})
	for _, body := range [][]byte{
		review("CREATE", "stall-ghost-co", "mallory", aqJSON("stall-ghost-co", "ghost-co", "", `{"role":"Cohort","parentRef":{"name":"stall"}}`), ""),
		review("CREATE", "stall-ghost-1", "mallory", aqJSON("stall-ghost-1", "ghost-1", "", team("stall", "4")), ""),
		review("CREATE", "stall-ghost-2", "mallory", aqJSON("stall-ghost-2", "ghost-2", "", team("stall", "4")), ""),
		review("DELETE", c.Name, "mallory", "", aqJSON(c.Name, string(c.UID), c.ResourceVersion, team("stall", "2"))),
	} {
		code, resp, err := p.post(ctx, webhook.Path, body, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, 200, code, resp)
		require.Contains(t, resp, `"allowed":true`, "a forged review was not admitted: the test proves nothing")
	}
	forged := func() int {
		n := len(reservationsOf(t, c.Name))
		for _, g := range []string{"stall-ghost-co", "stall-ghost-1", "stall-ghost-2"} {
			n += len(reservationsOf(t, g))
		}
		return n
	}
	require.Equal(t, 4, forged(), "the forged reviews were not all reserved")

	bound0 := r.metric(t, "ome_quota_webhook_bound_total", `outcome="admitted"`)
	settle0 := r.metric(t, "ome_quota_webhook_waits_total", `for="settle"`)
	nominal := func(n int) []byte {
		return []byte(fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, n))
	}
	// 6 stored, 8 forged: each write below fits with them all in 30.
	genuine := []struct {
		what string
		do   func() error
	}{
		{"raise stall-a", func() error {
			_, err := aqs.Patch(ctx, "stall-a", types.MergePatchType, nominal(4), metav1.PatchOptions{})
			return err
		}},
		{"create stall-d", func() error {
			_, err := aqs.Create(ctx, aqtest.Team("stall-d", "stall").Budget(gpu, "a100", "3").Obj(), metav1.CreateOptions{})
			return err
		}},
		{"create the Cohort stall-e", func() error {
			_, err := aqs.Create(ctx, aqtest.Cohort("stall-e", "stall").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
			return err
		}},
		{"raise stall-b", func() error {
			_, err := aqs.Patch(ctx, "stall-b", types.MergePatchType, nominal(5), metav1.PatchOptions{})
			return err
		}},
		{"delete stall-d", func() error { return aqs.Delete(ctx, "stall-d", metav1.DeleteOptions{}) }},
		{"delete the Cohort stall-e", func() error { return aqs.Delete(ctx, "stall-e", metav1.DeleteOptions{}) }},
		{"delete stall-c", func() error { return aqs.Delete(ctx, "stall-c", metav1.DeleteOptions{}) }},
	}
	for _, g := range genuine {
		require.NoError(t, g.do(), "%s beside four forged reservations", g.what)
	}
	require.Equal(t, 3, forged()-len(reservationsOf(t, c.Name)), "the forged creates left the ledger before the genuine writes ended: the test proves nothing")
	// Every genuine write but the last, the delete of stall-c (beside
	// which the forged delete of the same version is not counted: only one
	// of them can land), met all four.
	require.GreaterOrEqual(t, r.metric(t, "ome_quota_webhook_bound_total", `outcome="admitted"`)-bound0, float64(len(genuine)-1),
		"the genuine writes were not judged on the bound of the forged reservations")
	require.Zero(t, r.metric(t, "ome_quota_webhook_waits_total", `for="settle"`)-settle0, "a genuine write waited for the forged reservations to settle")

	// 2. Forged UPDATEs with bases just ahead of the replica, asking for
	// an hour each, beside genuine writes.
	a, err := aqs.Get(ctx, "stall-a", metav1.GetOptions{})
	require.NoError(t, err)
	floodCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	var sent, answered, admittedForged, late atomic.Int64
	var wg sync.WaitGroup
	// The forger reads how far stall-a is, as any client may, and names
	// the versions just after it.
	var rv atomic.Uint64
	rv.Store(parseRV(a.ResourceVersion))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for floodCtx.Err() == nil {
			if cur, err := aqs.Get(ctx, "stall-a", metav1.GetOptions{}); err == nil {
				rv.Store(parseRV(cur.ResourceVersion))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; floodCtx.Err() == nil; i++ {
				base := rv.Load() + 1 + uint64((g+i)%3)
				if i%4 == 3 {
					base = 1 << 40
				}
				body := review("UPDATE", "stall-a", "mallory", aqJSON("stall-a", string(a.UID), fmt.Sprint(base), team("stall", "9")),
					aqJSON("stall-a", string(a.UID), fmt.Sprint(base), team("stall", "4")))
				sent.Add(1)
				code, resp, err := p.post(ctx, webhook.Path+"?timeout=3600s", body, 20*time.Second)
				switch {
				case err != nil:
					late.Add(1)
				case code == 200:
					answered.Add(1)
					if strings.Contains(resp, `"allowed":true`) {
						admittedForged.Add(1)
					}
				}
			}
		}()
	}
	var waitingMax atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for floodCtx.Err() == nil {
			if n := int64(r.metric(t, "ome_quota_webhook_waiting")); n > waitingMax.Load() {
				waitingMax.Store(n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// A genuine write is sent again while it is refused with "retry": a
	// review that needs a waiting slot (its base ahead of this replica's
	// view) may find them taken by forged ones. Each must be answered,
	// and admitted in the end.
	writes, retries := 0, 0
	genuineWrite := func(what string, w func() error) {
		err := w()
		for deadline := time.Now().Add(time.Minute); isRetry(err) && time.Now().Before(deadline); err = w() {
			retries++
		}
		require.NoError(t, err, "a genuine %s beside the forged bases", what)
		writes++
	}
	for n := 5; floodCtx.Err() == nil; n++ {
		genuineWrite("raise", func() error {
			_, err := aqs.Patch(ctx, "stall-b", types.MergePatchType, nominal(5+n%3), metav1.PatchOptions{})
			return err
		})
		name := fmt.Sprintf("stall-f%d", n)
		genuineWrite("create", func() error {
			_, err := aqs.Create(ctx, aqtest.Team(name, "stall").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
			return err
		})
		genuineWrite("delete", func() error { return aqs.Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	wg.Wait()
	<-sampled
	t.Logf("forged updates with bases ahead: %d sent, %d answered (%d admitted: by then stall-a had moved past their base, so they could not land), %d not answered within 20 s; genuine writes beside them: %d, refused with retry %d times before they were admitted; reviews waiting at most %d (sampled), waiting slots found taken %v times",
		sent.Load(), answered.Load(), admittedForged.Load(), late.Load(), writes, retries, waitingMax.Load(), r.metric(t, "ome_quota_webhook_waits_total", `outcome="full"`))
	require.Greater(t, sent.Load(), int64(100), "the forger sent too little to prove anything")
	require.Zero(t, late.Load(), "forged reviews held their connection past the webhook's timeout")
	got, err := aqs.Get(ctx, "stall-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "4", got.Spec.Budgets[0].Nominal.String(), "a forged update landed")
	require.LessOrEqual(t, waitingMax.Load(), int64(8), "more than a quarter of the 32 slots waited")
	within := r.metric(t, "ome_quota_webhook_review_seconds_bucket", `verdict="unavailable"`, `le="3.2768`)
	all := r.metric(t, "ome_quota_webhook_review_seconds_count", `verdict="unavailable"`)
	require.Positive(t, all)
	require.Equal(t, all, within, "refusals answered later than the webhook's timeout (3 s)")
	require.Empty(t, storedViolations(t, aqs, "stall"))
}

// dropReservations takes the reservations of nodes named with prefix out
// of the admission ledger, as an admin who knows they were forged may:
// until they expire, they keep their parent from being deleted.
func dropReservations(t *testing.T, prefix string) {
	t.Helper()
	ctx := context.Background()
	cs, err := versioned.NewForConfig(cluster.Config)
	require.NoError(t, err)
	for range 20 {
		led, err := cs.OmeV1beta1().AdmissionLedgers().Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.NoError(t, err)
		led.Spec.Reservations = slices.DeleteFunc(led.Spec.Reservations, func(res v1beta1.Reservation) bool { return strings.HasPrefix(res.Node, prefix) })
		led.Spec.ReservationCount = int32(len(led.Spec.Reservations))
		if _, err = cs.OmeV1beta1().AdmissionLedgers().Update(ctx, led, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			require.NoError(t, err)
			return
		}
	}
	t.Fatal("the ledger kept changing: the forged reservations stay until they expire")
}
