package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/api/v1beta1"
)

// TestStartSweepsOrphanLocalQueues: a LocalQueue with the manager's label
// whose name is no node's (left by a node deleted while no manager ran) is
// found by the first full comparison, which the caches' initial listing
// does not trigger on its own, and deleted; a LocalQueue of that kind
// without the label is somebody else's and stays.
func TestStartSweepsOrphanLocalQueues(t *testing.T) {
	ctx := context.Background()
	lqs := cluster.Kueue.KueueV1beta2().LocalQueues("ml-serving")
	lq := func(name string, managed bool) *kueuev1beta2.LocalQueue {
		o := &kueuev1beta2.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(name)}}
		if managed {
			o.Labels = map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}
		}
		return o
	}
	for _, o := range []*kueuev1beta2.LocalQueue{lq("orphan-team", true), lq("foreign-team", false)} {
		eventually(t, 30*time.Second, func() string { // Kueue's webhook answers once it is up
			if _, err := lqs.Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err.Error()
			}
			return ""
		})
	}
	t.Cleanup(func() { _ = lqs.Delete(context.Background(), "foreign-team", metav1.DeleteOptions{}) })

	startManager(t, "orphans")
	eventually(t, 30*time.Second, func() string {
		if _, err := lqs.Get(ctx, "orphan-team", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the managed LocalQueue of no node is still there (%v)", err)
		}
		return ""
	})
	_, err := lqs.Get(ctx, "foreign-team", metav1.GetOptions{})
	require.NoError(t, err, "a LocalQueue without the manager's label is not the manager's to delete")
}
