package webhook

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// TestCancelledReviewsWhileRacing runs the races of
// TestConcurrentConflictingWrites with, in every round, a burst of reviews
// posted straight to the replicas for a sibling write (a team without
// budgets, which the rules deny) whose clients give up after 1 to 20 ms,
// while the review waits for the round's own writes to land. A review
// that ends early leaves nothing behind: no rule-breaking tree is stored,
// and every write that fits alone is admitted in some order.
func TestCancelledReviewsWhileRacing(t *testing.T) {
	var sent, cancelled atomic.Int64
	var p *poster
	var once sync.Once
	burst := func(ctx context.Context, lb int, c string) {
		once.Do(func() { p = newPoster(t, lb) })
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := review("CREATE", c+"-z", "burst", aqJSON(c+"-z", fmt.Sprintf("burst-%s-%d", c, i), "",
					`{"role":"ClusterQueue","parentRef":{"name":"`+c+`"}}`), "")
				sent.Add(1)
				if _, _, err := p.post(ctx, webhook.Path, body, time.Duration(1+rand.IntN(20))*time.Millisecond); err != nil {
					cancelled.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	raceRounds(t, raceConfig{burst: burst})
	t.Logf("burst reviews: %d sent, %d given up by their client", sent.Load(), cancelled.Load())
	require.Positive(t, cancelled.Load(), "no burst review was cancelled: the test proves nothing")
}

// TestSkewedClocks runs the races with the replicas' clocks 30 s ahead and
// 30 s behind: no decision compares one replica's clock with another's,
// so the stored tree still breaks no rule.
func TestSkewedClocks(t *testing.T) {
	for _, skew := range []string{"30s", "-30s"} {
		t.Run(skew, func(t *testing.T) {
			raceRounds(t, raceConfig{rounds: 10, env: [2][]string{
				{"OME_QUOTA_MANAGER_CLOCK_SKEW=" + skew}, {"OME_QUOTA_MANAGER_CLOCK_SKEW=-" + strings.TrimPrefix(skew, "-")}}})
		})
	}
}

// TestStoppedReplica stops one replica (SIGSTOP) for 20 s in the middle of
// the races and lets it go on: the writes it held time out in the API
// server, its late answers and reservations land nowhere, and the stored
// tree breaks no rule.
func TestStoppedReplica(t *testing.T) {
	raceRounds(t, raceConfig{rounds: 5, during: func(_, r2 *replica) {
		time.Sleep(2 * time.Second)
		require.NoError(t, syscall.Kill(r2.Pid(), syscall.SIGSTOP))
		time.Sleep(20 * time.Second)
		require.NoError(t, syscall.Kill(r2.Pid(), syscall.SIGCONT))
		time.Sleep(2 * time.Second)
	}})
}

// TestCreateAndDeleteAtOnce creates a team and deletes it at once, five
// times, then makes five more tree writes: every one is admitted at the
// first try, and each create and delete settles once the replica has seen
// it: the replica's next reservations remove them from the ledger, long
// before they would expire (75 s). A create and delete that never settled
// would stay there, and every write near them would be judged on their
// combinations until they expired. Whether a write was judged while they
// were still in flight depends on how fast the informer delivers on a
// loaded machine, so it is logged, not judged.
func TestCreateAndDeleteAtOnce(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	r := startReplica(t, "loop", port)
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "loop") })
	_, err = aqs.Create(ctx, aqtest.Cohort("loop", "root").Budget(gpu, "a100", "10").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	uncertain := r.metric(t, "ome_quota_webhook_uncertain_total")
	judged := r.metric(t, "ome_quota_webhook_judge_seconds_count")
	reserved := r.metric(t, "ome_quota_webhook_ledger_total", `outcome="reserved"`)
	var took []time.Duration
	timed := func(what string, f func() error) {
		start := time.Now()
		require.NoError(t, f(), what)
		took = append(took, time.Since(start))
	}
	for i := range 5 {
		timed(fmt.Sprintf("create %d", i), func() error {
			_, err := aqs.Create(ctx, aqtest.Team("loop-t", "loop").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
			return err
		})
		timed(fmt.Sprintf("delete %d", i), func() error { return aqs.Delete(ctx, "loop-t", metav1.DeleteOptions{}) })
	}
	for i := range 5 {
		timed(fmt.Sprintf("write %d", i), func() error {
			_, err := aqs.Create(ctx, aqtest.Team(fmt.Sprintf("loop-u%d", i), "loop").Budget(gpu, "a100", "2").Obj(), metav1.CreateOptions{})
			return err
		})
	}
	t.Logf("each write took: %v", took)
	require.GreaterOrEqual(t, r.metric(t, "ome_quota_webhook_judge_seconds_count")-judged, 15.0, "the webhook did not judge every write")
	// The creates reserved: the ledger held loop-t's reservations.
	require.GreaterOrEqual(t, r.metric(t, "ome_quota_webhook_ledger_total", `outcome="reserved"`)-reserved, 5.0, "the creates reserved nothing")
	t.Logf("writes judged while related ones were in flight: %v", r.metric(t, "ome_quota_webhook_uncertain_total")-uncertain)

	// Each probe, a Cohort created under root, is a reservation of this
	// replica's, which removes every reservation its view shows settled.
	var left []string
	for i := range 40 {
		left = left[:0]
		for _, res := range reservationsOf(t, "loop-t") {
			left = append(left, res.Operation+" "+res.UID)
		}
		if len(left) == 0 {
			return
		}
		_, err = aqs.Create(ctx, aqtest.Cohort(fmt.Sprintf("loop-p%d", i), "root").Obj(), metav1.CreateOptions{})
		require.NoError(t, err, "probe %d", i)
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("after 40 more reservations by the replica, the ledger still holds loop-t's: %v", left)
}

// TestForgedRequests: an unauthenticated client that reaches the webhook
// port posts to every path it can think of, and a stream of forged reviews
// (a DELETE and an UPDATE of a node "by alice", creates of a team that
// would take the Cohort's room), while genuine writes run through the API
// server. No genuine write fails (a refusal says "retry", and they stop
// within the reservation expiry of the stream's end), none is
// over-admitted, the node alice "deleted" is still there, and the
// recorded trail names alice as the author of no change.
func TestForgedRequests(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	logDir := t.TempDir()
	const expiry = 30 * time.Second
	// The forged reservations never land: a short expiry only makes the
	// test shorter, and the flags must allow it (Options.Validate).
	r := startReplica(t, "forged", port, "--event-log="+logDir, "--webhook-reservation-expiry=30s", "--apiserver-request-timeout=20s")
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "forge") })
	_, err = aqs.Create(ctx, aqtest.Cohort("forge", "root").Budget(gpu, "a100", "10").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	keep, err := aqs.Create(ctx, aqtest.Team("forge-keep", "forge").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	p := newPoster(t, port)

	// Every path but the review path answers 404 and changes nothing.
	for _, path := range []string{"/", "/admission-term/judge", "/metrics", "/validate-acceleratorquota/x", "/readyz"} {
		code, body, err := p.post(ctx, path, []byte(`{"holder":"x"}`), 5*time.Second)
		require.NoError(t, err, path)
		require.Equal(t, http.StatusNotFound, code, "POST %s: %s", path, body)
	}

	keepJSON := aqJSON("forge-keep", string(keep.UID), keep.ResourceVersion,
		`{"role":"ClusterQueue","parentRef":{"name":"forge"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1"}]}`)
	forged := func(i int) []byte {
		switch i % 3 {
		case 0:
			return review("DELETE", "forge-keep", "alice", "", keepJSON)
		case 1:
			return review("UPDATE", "forge-keep", "alice", aqJSON("forge-keep", string(keep.UID), keep.ResourceVersion,
				`{"role":"ClusterQueue","parentRef":{"name":"forge"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"5"}]}`), keepJSON)
		default:
			return review("CREATE", "forge-ghost", "alice", aqJSON("forge-ghost", fmt.Sprintf("ghost-%d", i), "",
				`{"role":"ClusterQueue","parentRef":{"name":"forge"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"6"}]}`), "")
		}
	}
	var streamEnd atomic.Int64
	var wg sync.WaitGroup
	var posted atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += 4 {
				if streamEnd.Load() != 0 {
					return
				}
				_, _, _ = p.post(ctx, webhook.Path, forged(i), 2*time.Second)
				posted.Add(1)
			}
		}()
	}
	go func() { time.Sleep(8 * time.Second); streamEnd.Store(time.Now().UnixNano()) }()

	// Genuine writes: teams of 1 and 2 under forge, raises of forge-keep
	// to 3, each retried while the webhook says to.
	var lastRefusal atomic.Int64
	genuine := func(ctx context.Context, w func(context.Context) error) error {
		deadline := time.Now().Add(2*expiry + 30*time.Second)
		for {
			err := w(ctx)
			if err == nil || !isRetry(err) || time.Now().After(deadline) {
				return err
			}
			lastRefusal.Store(time.Now().UnixNano())
			time.Sleep(200 * time.Millisecond)
		}
	}
	for i := range 6 {
		name := fmt.Sprintf("forge-t%d", i)
		require.NoError(t, genuine(ctx, func(ctx context.Context) error {
			_, err := aqs.Create(ctx, aqtest.Team(name, "forge").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}), "genuine create of %s", name)
	}
	require.NoError(t, genuine(ctx, func(ctx context.Context) error {
		_, err := aqs.Patch(ctx, "forge-keep", types.MergePatchType,
			[]byte(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"3"}]}}`), metav1.PatchOptions{})
		return err
	}), "genuine raise of forge-keep")
	for streamEnd.Load() == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("forged reviews posted: %d", posted.Load())
	require.Positive(t, posted.Load())
	if last := lastRefusal.Load(); last != 0 {
		after := time.Duration(last - streamEnd.Load())
		t.Logf("the last refusal of a genuine write came %v after the forged stream ended", after)
		require.Less(t, after, expiry+5*time.Second, "refusals went on past the reservation expiry after the stream ended")
	}
	// 6 + 3 = 9 of the Cohort's 10: the stored tree breaks no rule, and
	// forge-keep is still there, at 3.
	require.Empty(t, storedViolations(t, aqs, "forge"))
	got, err := aqs.Get(ctx, "forge-keep", metav1.GetOptions{})
	require.NoError(t, err, "forge-keep, which the forged review deleted")
	require.Equal(t, "3", got.Spec.Budgets[0].Nominal.String())
	_, err = aqs.Get(ctx, "forge-ghost", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "forge-ghost exists: %v", err)

	// The trail: stop the replica so that its log is whole, then replay.
	r.Stop()
	out, err := exec.Command(cluster.ManagerBin, "replay", logDir, "--node", "forge-keep", "--history").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("history of forge-keep:\n%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "alice") {
			// A claim or a denied request, never the author of a write.
			require.False(t, strings.Contains(line, "landed as") || strings.Contains(line, "written"),
				"the trail names the forger as an author: %q", line)
		}
	}
	require.Contains(t, string(out), "alice", "the forged reviews are not in the trail at all: the check above proves nothing")
	// A replica on the same port again, for the clean-up's deletes (before
	// its own clean-up stops it).
	startReplica(t, "forged-after", port)
	deleteByPrefix(t, aqs, "forge")
}
