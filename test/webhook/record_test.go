package webhook

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/webhook"
)

const recordName = "ome-quota-manager-admissions"

// TestAdmissionRecord covers what docs/webhook.md says of the record when
// things go wrong: a write the record lists that never lands (its replica
// died before answering) holds later writes up for Settle and no longer; a
// record written by a newer version, and one without the manager's label,
// make the webhook refuse to judge with a message that says what to do.
func TestAdmissionRecord(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	// Without the admission term: every admission writes the record.
	r := startReplica(t, "record", port, "--webhook-admission-term=0")
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	cms := cluster.Kube.CoreV1().ConfigMaps(ns)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "record-") })
	create := func(name string) error {
		_, err := aqs.Create(ctx, aqtest.Team(name, "root").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
		return err
	}
	// The first admitted tree write creates the record.
	require.NoError(t, create("record-first"))
	cm, err := cms.Get(ctx, recordName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, cm.Data[webhook.RecordKey], `"name":"record-first"`)

	t.Run("a lowering of a team's budgets leaves the record alone", func(t *testing.T) {
		budget := func(nominal string) error {
			_, err := aqs.Patch(ctx, "record-first", types.MergePatchType, []byte(
				`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"`+nominal+`"}]}}`), metav1.PatchOptions{})
			return err
		}
		version := func() string {
			cm, err := cms.Get(ctx, recordName, metav1.GetOptions{})
			require.NoError(t, err)
			return cm.ResourceVersion
		}
		skipped := r.metric(t, "ome_quota_webhook_record_writes_total", `outcome="skipped"`)
		before := version()
		require.NoError(t, budget("0"))
		require.Equal(t, before, version(), "a lowering was written into the record")
		// At least once: the API server judges a write again when the
		// manager's status write of the team lands during its admission.
		require.GreaterOrEqual(t, r.metric(t, "ome_quota_webhook_record_writes_total", `outcome="skipped"`), skipped+1,
			"the lowering did not reach the webhook, or was not told apart")
		// A raise is serialized.
		require.NoError(t, budget("1"))
		require.NotEqual(t, before, version(), "a raise was not written into the record")
	})

	setRecord := func(data string, labelled bool) {
		t.Helper()
		cm, err := cms.Get(ctx, recordName, metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data = map[string]string{webhook.RecordKey: data}
		if !labelled {
			cm.Labels = nil
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	t.Run("a listed write that never lands", func(t *testing.T) {
		at := time.Now().UTC().Format(time.RFC3339Nano)
		setRecord(fmt.Sprintf(`{"format":1,"writes":[{"name":"record-ghost","op":"CREATE","at":%q,"by":"a dead replica"}]}`, at), true)
		waited := r.metric(t, "ome_quota_webhook_settle_wait_seconds_sum")
		require.NoError(t, create("record-after-ghost"), "a write was refused because of a write that never landed")
		require.GreaterOrEqual(t, r.metric(t, "ome_quota_webhook_settle_wait_seconds_sum")-waited, 2.5,
			"the review did not wait for the write the record lists")
		// Once given up on, the write holds nothing up: the next review
		// does not wait for it again.
		waited = r.metric(t, "ome_quota_webhook_settle_wait_seconds_sum")
		require.NoError(t, create("record-after-ghost-2"))
		require.Less(t, r.metric(t, "ome_quota_webhook_settle_wait_seconds_sum")-waited, 2.5,
			"the review waited again for a write already given up on")
	})

	t.Run("a record of a newer format", func(t *testing.T) {
		setRecord(`{"format":3,"writes":[]}`, true)
		err := create("record-newer")
		require.Error(t, err)
		require.Contains(t, err.Error(), "written by a newer quota manager than this one (format 2): finish the upgrade of every replica")
		// A write that cannot change a verdict is not held up.
		_, err = aqs.Patch(ctx, "record-first", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	})

	t.Run("a record without the manager's label", func(t *testing.T) {
		setRecord(`{"format":1,"writes":[]}`, false)
		err := create("record-unlabelled")
		require.Error(t, err)
		require.Contains(t, err.Error(), "lacks the label ome.io/quota-managed-by=ome-quota-manager")
		require.Contains(t, err.Error(), "kubectl label configmap -n ome "+recordName)
	})

	// Deleted, the record is created again by the next admitted write.
	require.NoError(t, cms.Delete(ctx, recordName, metav1.DeleteOptions{}))
	require.NoError(t, create("record-again"))
	cm, err = cms.Get(ctx, recordName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "ome-quota-manager", cm.Labels["ome.io/quota-managed-by"])
}
