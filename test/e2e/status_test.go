package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// TestStatusCoalescesABurstOfEdits edits one team's budget 30 times in a
// row: its status is written at once after a quiet second, then at most
// once a second while the edits go on, and it ends at the last
// generation. Without the bound it is written once per edit.
func TestStatusCoalescesABurstOfEdits(t *testing.T) {
	ctx := context.Background()
	// No refresh of root's stamps: the only status writes are the team's.
	m := startManager(t, "burst", "--capacity-report-interval=0s")
	team := aqtest.Team("burst-team", "root").Budget("nvidia.com/gpu", "a100", "1").Obj()
	_, err := aqs.Create(ctx, team, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), team.Name, metav1.DeleteOptions{}) })
	settled := func(want int64) func() string {
		return func() string {
			cur, err := aqs.Get(ctx, team.Name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if cur.Generation != want || cur.Status.ObservedGeneration != want {
				return fmt.Sprintf("generation %d, observed %d, want %d", cur.Generation, cur.Status.ObservedGeneration, want)
			}
			return ""
		}
	}
	eventually(t, 30*time.Second, settled(1))
	time.Sleep(1100 * time.Millisecond) // a quiet second: the next write goes at once
	before := m.metric(ctx, "ome_quota_backend_writes_total", `kind="status"`)

	const edits = 30
	start := time.Now()
	for i := 0; i < edits; i++ {
		patch := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%d"}]}}`, 2+i%2)
		_, err := aqs.Patch(ctx, team.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	burst := time.Since(start)
	eventually(t, 30*time.Second, settled(1+edits))

	writes := int(m.metric(ctx, "ome_quota_backend_writes_total", `kind="status"`) - before)
	// The first edit's status at once, one for each second the burst
	// lasted, and the last edit's at most a second after it.
	bound := 2 + int(burst/time.Second)
	t.Logf("%d edits in %s: %d status writes (bound %d)", edits, burst.Round(time.Millisecond), writes, bound)
	require.GreaterOrEqual(t, writes, 1)
	require.LessOrEqual(t, writes, bound, "status writes of a burst of %d edits in %s", edits, burst)
}
