package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// TestForeignLocalQueueHoldsOnlyItself: a LocalQueue named like a team in
// one enrolled namespace, created by someone else, is never written, and
// the team reports it; the team's ClusterQueue and its LocalQueues in the
// other namespaces still follow its budget.
func TestForeignLocalQueueHoldsOnlyItself(t *testing.T) {
	ctx := context.Background()
	ensureGuideCluster(t, 4)
	require.NoError(t, cluster.EnsureNamespace(ctx, "ml-squat"))
	kq := cluster.Kueue.KueueV1beta2()
	_, err := kq.LocalQueues("ml-squat").Create(ctx, &kueuev1beta2.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "squat-team", Namespace: "ml-squat"},
		Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: "elsewhere"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	startManager(t, "squat", "--enrolled-namespaces=ml-serving,ml-squat")
	_, err = aqs.Create(ctx, aqtest.Team("squat-team", v1beta1.RootName).Budget("nvidia.com/gpu", "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = aqs.Delete(ctx, "squat-team", metav1.DeleteOptions{})
		_ = kq.LocalQueues("ml-squat").Delete(ctx, "squat-team", metav1.DeleteOptions{})
	})

	nominal := func(want string) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			cq, err := kq.ClusterQueues().Get(ctx, "squat-team", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota; got.Cmp(resource.MustParse(want)) != 0 {
				return fmt.Sprintf("squat-team's ClusterQueue has nominal %s, want %s", got.String(), want)
			}
			return ""
		})
	}
	nominal("1")
	// The team's LocalQueue in the other namespace follows its ClusterQueue.
	eventually(t, 30*time.Second, func() string {
		lq, err := kq.LocalQueues("ml-serving").Get(ctx, "squat-team", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if lq.Spec.ClusterQueue != "squat-team" {
			return fmt.Sprintf("ml-serving/squat-team points at %s", lq.Spec.ClusterQueue)
		}
		return ""
	})
	eventually(t, 30*time.Second, func() string {
		aq, err := aqs.Get(ctx, "squat-team", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		c := condition(aq, "Materialized")
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ObjectConflict" || !strings.Contains(c.Message, "LocalQueue ml-squat/squat-team") {
			return fmt.Sprintf("Materialized: %+v", c)
		}
		evs, err := cluster.Kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=squat-team,reason=ObjectConflict"})
		if err != nil || len(evs.Items) == 0 || evs.Items[0].Type != corev1.EventTypeWarning {
			return fmt.Sprintf("no ObjectConflict Event on squat-team: %v %+v", err, evs)
		}
		return ""
	})

	// A raise still reaches the ClusterQueue.
	team, err := aqs.Get(ctx, "squat-team", metav1.GetOptions{})
	require.NoError(t, err)
	team.Spec.Budgets[0].Nominal = resource.MustParse("2")
	_, err = aqs.Update(ctx, team, metav1.UpdateOptions{})
	require.NoError(t, err)
	nominal("2")

	foreign, err := kq.LocalQueues("ml-squat").Get(ctx, "squat-team", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, kueuev1beta2.ClusterQueueReference("elsewhere"), foreign.Spec.ClusterQueue, "the foreign LocalQueue was rewritten")
	require.NotContains(t, foreign.Labels, v1beta1.ManagedByLabel)
	for _, mf := range foreign.ManagedFields {
		require.NotEqual(t, "ome-quota-manager", mf.Manager, "the manager wrote to a foreign LocalQueue")
	}
}
