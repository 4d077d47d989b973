package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestDriftRepairIsExplained: a team's ClusterQueue edited and its
// LocalQueue deleted behind the manager's back are written back, and the
// recorded log says why: each change is a Drift event, which
// "replay --why" lists with the repair it asked for. The statuses the
// leader wrote are those "replay --state" prints, stamps included.
func TestDriftRepairIsExplained(t *testing.T) {
	ctx := context.Background()
	// The guide's Nodes (TestGuide applies them again), and its flavor for
	// this test only: TestGuide, which runs next, creates it.
	for i := 1; i <= 3; i++ {
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.GPUNode(fmt.Sprintf("gpu-node-%d", i), 8))
		require.NoError(t, err)
	}
	testutil.A100Flavor(t, cluster)
	dir := filepath.Join(t.TempDir(), "events")
	m := startManager(t, "drift", "--event-log="+dir, "--resync-interval=1h")
	kq := cluster.Kueue.KueueV1beta2()
	team := aqtest.Team("drift-team", "root").Budget("nvidia.com/gpu", "a100", "2").Obj()
	_, err := aqs.Create(ctx, team, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), team.Name, metav1.DeleteOptions{}) })
	testutil.WaitMaterialized(t, cluster, team.Name)

	_, err = kq.ClusterQueues().Patch(ctx, team.Name, types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota","value":"7"}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() string {
		cq, err := kq.ClusterQueues().Get(ctx, team.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if q := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota; q.String() != "2" {
			return fmt.Sprintf("the ClusterQueue's nominalQuota is %s, want 2 written back", q.String())
		}
		return ""
	})
	lq, err := kq.LocalQueues("ml-serving").Get(ctx, team.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, kq.LocalQueues("ml-serving").Delete(ctx, team.Name, metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() string {
		again, err := kq.LocalQueues("ml-serving").Get(ctx, team.Name, metav1.GetOptions{})
		if err != nil || again.UID == lq.UID {
			return fmt.Sprintf("the deleted LocalQueue is not written back: %v", err)
		}
		return ""
	})

	why := replayCmd(t, dir, "--why", team.Name)
	t.Logf("replay --why %s:\n%s", team.Name, why)
	for _, want := range []string{
		"drift-team's Kueue objects were changed behind the manager's back 2 times in the log",
		"ClusterQueue drift-team was edited behind the manager's back",
		"LocalQueue ml-serving/drift-team was deleted behind the manager's back",
		": the leader wrote back what differed",
	} {
		require.Contains(t, why, want, "replay --why drift-team")
	}
	require.Equal(t, 2, strings.Count(why, ": the leader wrote back what differed"), "replay --why drift-team:\n%s", why)
	// The manager's own writes are no drift: the team's creation and the
	// two repairs made none.
	require.NotContains(t, why, "was created behind", "replay --why drift-team")

	eventually(t, 30*time.Second, func() string {
		if _, diff := statusesDiffer(t, dir); diff != "" {
			return "the statuses in the API server are not the replay's (-replay +API server):\n" + diff
		}
		return ""
	})

	// Deleted while the manager runs, which sweeps its Kueue objects (and
	// so frees the flavor for its deletion at the end of the test).
	require.NoError(t, aqs.Delete(ctx, team.Name, metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() string {
		if _, err := kq.ClusterQueues().Get(ctx, team.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("drift-team's ClusterQueue is not swept: %v", err)
		}
		return ""
	})
	m.Stop()
}
