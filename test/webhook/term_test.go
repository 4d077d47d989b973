package webhook

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/webhook"
)

// recordTerm is the record's format and term holder, as the ConfigMap
// holds them now.
func recordTerm(t *testing.T) (format int, holder, rv string) {
	t.Helper()
	cm, err := cluster.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), recordName, metav1.GetOptions{})
	require.NoError(t, err)
	var d struct {
		Format int `json:"format"`
		Term   *struct {
			Holder string `json:"holder"`
		} `json:"term"`
	}
	require.NoError(t, json.Unmarshal([]byte(cm.Data[webhook.RecordKey]), &d), cm.Data[webhook.RecordKey])
	if d.Term != nil {
		holder = d.Term.Holder
	}
	return d.Format, holder, cm.ResourceVersion
}

// TestAdmissionTerm covers the admission term (docs/webhook.md): one
// replica takes it and admits raises without writing the record, the other
// hands it the writes it gets; a holder stopped hands the term back, and
// one killed leaves it to run out, after which the other takes it.
func TestAdmissionTerm(t *testing.T) {
	ctx := context.Background()
	whole := t
	ensureSecret(t)
	lb := freePort(t)
	installConfig(t, lb)
	// A record of its own: earlier tests leave writes listed that never
	// land, which a first judgement waits for.
	_ = cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, recordName, metav1.DeleteOptions{})
	// Renewed every second, run out after 3s.
	flags := []string{"--webhook-admission-term=3s"}
	r1 := startReplica(t, "term-1", freePort(t), flags...)
	r2 := startReplica(t, "term-2", freePort(t), flags...)
	b := startBalancer(t, lb, [2]int{r1.port, r2.port})
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "term-") })
	budget := func(name, nominal string) error {
		_, err := aqs.Patch(ctx, name, types.MergePatchType, []byte(
			`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"`+nominal+`"}]}}`), metav1.PatchOptions{})
		return err
	}
	_, err = aqs.Create(ctx, aqtest.Cohort("term-c", "root").Budget(gpu, "a100", "10").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aqs.Create(ctx, aqtest.Team("term-a", "term-c").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	format, holderName, _ := recordTerm(t)
	require.Equal(t, 2, format, "a term is held, and the record is in the term's format")
	holder, other := r1, r2
	if holderName == r2.Name {
		holder, other = r2, r1
	}
	require.Equal(t, holder.Name, holderName)

	t.Run("raises in the term write no record; the other replica hands its writes over", func(t *testing.T) {
		term := holder.metric(t, "ome_quota_webhook_record_writes_total", `outcome="term"`)
		fwd := other.metric(t, "ome_quota_webhook_record_writes_total", `outcome="forwarded"`)
		written := holder.metric(t, "ome_quota_webhook_record_writes_total", `outcome="written"`) +
			other.metric(t, "ome_quota_webhook_record_writes_total", `outcome="written"`)
		sent := b.sent[0].Load() + b.sent[1].Load()
		// Two raises and a lowering in turn: the balancer alternates, so
		// the raises reach both replicas.
		for i := range 10 {
			require.NoError(t, budget("term-a", "2"), "raise %d", i)
			require.NoError(t, budget("term-a", "3"), "raise %d", i)
			require.NoError(t, budget("term-a", "1"), "lowering %d", i)
		}
		require.GreaterOrEqual(t, b.sent[0].Load()+b.sent[1].Load()-sent, int64(30), "the reviews did not pass the balancer")
		require.GreaterOrEqual(t, holder.metric(t, "ome_quota_webhook_record_writes_total", `outcome="term"`)-term, 10.0,
			"the holder did not admit the raises in its term")
		require.Positive(t, other.metric(t, "ome_quota_webhook_record_writes_total", `outcome="forwarded"`)-fwd,
			"the other replica handed the holder none of the raises it got")
		require.Equal(t, written, holder.metric(t, "ome_quota_webhook_record_writes_total", `outcome="written"`)+
			other.metric(t, "ome_quota_webhook_record_writes_total", `outcome="written"`),
			"a raise in the term wrote the record")
		// A raise the Cohort cannot hold is denied, wherever it lands.
		for range 2 {
			err := budget("term-a", "11")
			require.Error(t, err)
			require.Contains(t, err.Error(), "is 10 but its children total 11")
		}
	})

	t.Run("a holder stopped hands the term back", func(t *testing.T) {
		// Every review now reaches the other replica.
		b.backends[0].Store(int64(other.port))
		b.backends[1].Store(int64(other.port))
		holder.Stop()
		format, h, _ := recordTerm(t)
		require.Equal(t, 1, format, "the record after the hand-back")
		require.Empty(t, h)
		began := time.Now()
		require.NoError(t, budget("term-a", "4"))
		require.Less(t, time.Since(began), 3*time.Second, "the write waited for a term that was handed back")
		format, h, _ = recordTerm(t)
		require.Equal(t, 2, format)
		require.Equal(t, other.Name, h, "the remaining replica took the term")
		// Started under the whole test: it runs to its end.
		holder, other = other, startReplica(whole, holder.Name+"-again", freePort(t), flags...)
		b.backends[0].Store(int64(holder.port))
		b.backends[1].Store(int64(other.port))
	})

	t.Run("a holder killed leaves the term to run out", func(t *testing.T) {
		holder.Kill()
		// Every review now reaches the survivor.
		b.backends[0].Store(int64(other.port))
		b.backends[1].Store(int64(other.port))
		var first error
		began := time.Now()
		eventually(t, 20*time.Second, func() string {
			err := budget("term-a", "5")
			if err == nil {
				return ""
			}
			if first == nil {
				first = err
			}
			return err.Error()
		})
		// The term (3s) runs out, then its holder's last writes get Settle
		// (3s) to land.
		require.GreaterOrEqual(t, time.Since(began), 3*time.Second, "a write was admitted before the dead holder's term ran out")
		_, h, _ := recordTerm(t)
		require.Equal(t, other.Name, h, "the survivor took the term")
		// A write refused meanwhile said who holds the term, and to retry.
		require.Error(t, first, "no write was refused while the dead holder's term ran")
		require.Contains(t, first.Error(), "which holds the admission term, did not judge the write")
		require.Contains(t, first.Error(), "retry")
		// While the survivor serves: it stops before the test's own
		// clean-up runs.
		deleteByPrefix(t, aqs, "term-")
	})
}
