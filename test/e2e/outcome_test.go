package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
	"ome.io/quota-manager/test/testutil"
)

// TestConfirmingSendsNoOutcome: the applier's outcome on a node goes
// through the event stream only when it changes. A team brought in place
// gets one Applied outcome; the full comparisons that follow (one on every
// tick, once a second here) confirm its objects once and then find the
// tree unchanged, which their counters show, and send no further outcome:
// an outcome event starts no pass that would send another.
func TestConfirmingSendsNoOutcome(t *testing.T) {
	ctx := context.Background()
	ensureGuideCluster(t, 3)
	dir := filepath.Join(t.TempDir(), "events")
	m := startManager(t, "confirm", "--capacity-report-interval=1s", "--event-log="+dir)
	team := aqtest.Team("confirm-team", "root").Budget("nvidia.com/gpu", "a100", "1").Obj()
	_, err := aqs.Create(ctx, team, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), team.Name, metav1.DeleteOptions{}) })
	testutil.WaitMaterialized(t, cluster, team.Name)

	ticks := func() float64 { return m.metric(ctx, "ome_quota_events_total", `kind="Tick"`) }
	confirmed := func() float64 { return m.metric(ctx, "ome_quota_backend_applied_total", `kind="ClusterQueue"`) }
	unchanged := func() float64 {
		return m.metric(ctx, "ome_quota_full_comparison_nodes_total", `result="unchanged"`)
	}
	statuses := func() float64 { return m.metric(ctx, "ome_quota_backend_writes_total", `kind="status"`) }
	ticks0, confirmed0, unchanged0, statuses0 := ticks(), confirmed(), unchanged(), statuses()
	eventually(t, 30*time.Second, func() string {
		if n, u := ticks()-ticks0, unchanged()-unchanged0; n < 3 || u < 3 {
			return fmt.Sprintf("%.0f ticks, and %.0f nodes found unchanged by their full comparisons, since the team was materialized; want 3 of each", n, u)
		}
		return ""
	})
	passes, skipped, ticked, written := confirmed()-confirmed0, unchanged()-unchanged0, ticks()-ticks0, statuses()-statuses0
	// Each tick refreshes root's observedAt stamps (the report interval
	// is 1s here): one status write a tick, at most, and none for the
	// other nodes, whose statuses the full comparison finds in place.
	require.LessOrEqual(t, written, ticked+1, "status writes over %.0f ticks of a tree that did not change", ticked)
	// Gone with its objects before the stop, so that the next test's
	// manager (and its recorded log) does not find them.
	require.NoError(t, aqs.Delete(ctx, team.Name, metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() string {
		if _, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, team.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the ClusterQueue of the deleted team is still there (%v)", err)
		}
		return ""
	})
	m.Stop()
	require.Equal(t, 0, m.ExitCode())

	var outcomes []events.Outcome
	var lastTick, lastOutcome uint64
	rep, err := store.Read(dir, 0, func(ev events.Event) error {
		switch {
		case ev.Kind == events.KindOutcome && ev.Key == team.Name:
			outcomes = append(outcomes, *ev.Outcome)
			lastOutcome = ev.Seq
		case ev.Kind == events.KindTick:
			lastTick = ev.Seq
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, []events.Outcome{{Kind: events.OutcomeApplied}}, outcomes, "the team's outcome events")
	require.Greater(t, lastTick, lastOutcome, "the log holds no tick after the team's outcome")
	t.Logf("after the team's outcome, over %.0f ticks: ClusterQueues confirmed %.0f, nodes found unchanged %.0f; status writes meanwhile: %.0f; outcome events of the team: %d",
		ticked, passes, skipped, written, len(outcomes))
}
