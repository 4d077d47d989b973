package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// TestOnlyTheLeaderRestoresRoot: a replica that does not hold the Lease
// writes nothing, root included; once it leads, it puts root's finalizer
// back.
func TestOnlyTheLeaderRestoresRoot(t *testing.T) {
	ctx := context.Background()
	root, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		root, err = aqs.Create(ctx, aqtest.Cohort(v1beta1.RootName, "").Obj(), metav1.CreateOptions{})
	}
	require.NoError(t, err)
	root.Finalizers = nil
	_, err = aqs.Update(ctx, root, metav1.UpdateOptions{})
	require.NoError(t, err)

	// Somebody else holds the Lease, for an hour.
	leases := cluster.Kube.CoordinationV1().Leases("ome")
	_ = leases.Delete(ctx, "ome-quota-manager", metav1.DeleteOptions{})
	_, err = leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "ome-quota-manager", Namespace: "ome"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To(int32(3600)),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = leases.Delete(ctx, "ome-quota-manager", metav1.DeleteOptions{}) })

	m := startManager(t, "follower")
	// Its loop runs (three ticks after it was ready), and it leads nothing.
	ticks := m.metric(ctx, "ome_quota_events_total", `kind="Tick"`)
	eventually(t, 30*time.Second, func() string {
		if m.metric(ctx, "ome_quota_events_total", `kind="Tick"`) < ticks+3 {
			return "the follower has not ticked three times yet"
		}
		return ""
	})
	require.Zero(t, m.metric(ctx, "ome_quota_leader"))
	root, err = aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, root.Finalizers, v1beta1.RootFinalizer, "a follower wrote root")

	require.NoError(t, leases.Delete(ctx, "ome-quota-manager", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() string {
		root, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if !slices.Contains(root.Finalizers, v1beta1.RootFinalizer) {
			return "the new leader has not put root's finalizer back"
		}
		return ""
	})
	require.Equal(t, 1.0, m.metric(ctx, "ome_quota_leader"))
}
