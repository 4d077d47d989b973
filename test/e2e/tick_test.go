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
	"ome.io/quota-manager/test/testutil"
)

// TestTickComparesWhatChanged: the periodic full comparison skips a node
// found in place since anything it reads last changed, and still finds
// what changed behind the manager's back: a team's status edited by
// somebody else (which changes nothing the state reads: the same
// generation) is written back by the next tick. With a resync interval of
// 3s, nodes unchanged for that long are compared again, paced, and
// nothing is written for them.
func TestTickComparesWhatChanged(t *testing.T) {
	ctx := context.Background()
	ensureGuideCluster(t, 3)
	m := startManager(t, "tick", "--capacity-report-interval=1s", "--resync-interval=1h")
	team := aqtest.Team("tick-team", "root").Budget("nvidia.com/gpu", "a100", "1").Obj()
	_, err := aqs.Create(ctx, team, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), team.Name, metav1.DeleteOptions{}) })
	testutil.WaitMaterialized(t, cluster, team.Name)

	looked := func(m *managerProc, result string) float64 {
		return m.metric(ctx, "ome_quota_full_comparison_nodes_total", `result="`+result+`"`)
	}
	statuses := func(m *managerProc) float64 { return m.metric(ctx, "ome_quota_backend_writes_total", `kind="status"`) }
	unchanged0 := looked(m, "unchanged")
	eventually(t, 30*time.Second, func() string {
		if u := looked(m, "unchanged") - unchanged0; u < 3 {
			return fmt.Sprintf("the ticks found %.0f nodes unchanged, want at least 3", u)
		}
		return ""
	})
	require.Zero(t, looked(m, "paced"), "nodes compared again within the resync interval of 1h")

	// Only a tick can find this: the reducer ignores a status write.
	queued0, statuses0 := looked(m, "queued"), statuses(m)
	_, err = aqs.Patch(ctx, team.Name, types.MergePatchType, []byte(`{"status":{"summary":{"nominal":"999"}}}`), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	eventually(t, 15*time.Second, func() string {
		aq, err := aqs.Get(ctx, team.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if aq.Status.Summary == nil || aq.Status.Summary.Nominal != "1" {
			return fmt.Sprintf("the status edited behind the manager is not written back: summary %+v", aq.Status.Summary)
		}
		return ""
	})
	require.Greater(t, looked(m, "queued"), queued0, "a tick queued the node whose status changed")
	require.Greater(t, statuses(m), statuses0, "the status was written back")
	m.Stop()

	// A resync interval of 3s: what has not changed for that long is
	// compared again, and found in place.
	m = startManager(t, "tick-resync", "--capacity-report-interval=1s", "--resync-interval=3s")
	testutil.WaitMaterialized(t, cluster, team.Name)
	paced0 := looked(m, "paced")
	eventually(t, 30*time.Second, func() string {
		if p := looked(m, "paced") - paced0; p < 3 {
			return fmt.Sprintf("the ticks compared %.0f unchanged nodes again after the resync interval, want at least 3", p)
		}
		return ""
	})
	kueueWrites := func() float64 {
		var s float64
		for _, k := range []string{"Cohort", "ClusterQueue", "LocalQueue"} {
			s += m.metric(ctx, "ome_quota_backend_writes_total", `kind="`+k+`"`)
		}
		return s
	}
	writes0, paced1 := kueueWrites(), looked(m, "paced")
	eventually(t, 30*time.Second, func() string {
		if p := looked(m, "paced") - paced1; p < 3 {
			return fmt.Sprintf("%.0f more nodes compared again after the resync interval, want 3", p)
		}
		return ""
	})
	require.Equal(t, writes0, kueueWrites(), "Kueue writes while unchanged nodes were compared again")
}
