package webhook

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// TestStandingReservation raises a team's budget through replica A and
// lowers and raises it again: the first raise writes a standing
// reservation to the ledger, the later raises within it write nothing.
// With A stopped (so that it cannot release the reservation) and the team
// lowered through replica B, B refuses with "retry" a sibling that fits
// beside the team as it is and not beside the team at the reservation's
// spec; once A runs again it releases the reservation (the team's writes
// have landed), and B admits the sibling.
func TestStandingReservation(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	lb := freePort(t)
	installConfig(t, lb)
	// A standing reservation is held 10 s after its last write here (2 s
	// by default), so that a slow write or scrape between two raises on a
	// loaded machine does not let A release it before the test means to.
	hold := "--webhook-standing-hold=10s"
	a := startReplica(t, "stand-a", freePort(t), hold)
	b := startReplica(t, "stand-b", freePort(t), hold)
	bal := startBalancer(t, lb, [2]int{a.port, a.port})
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	cs, err := versioned.NewForConfig(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "stand") })
	ledger := func() *v1beta1.AdmissionLedger {
		led, err := cs.OmeV1beta1().AdmissionLedgers().Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.NoError(t, err)
		return led
	}
	standing := func(led *v1beta1.AdmissionLedger) []v1beta1.Reservation {
		var out []v1beta1.Reservation
		for _, r := range led.Spec.Reservations {
			if r.Node == "stand-t" && r.Base == "" && r.Since != "" {
				out = append(out, r)
			}
		}
		return out
	}
	nominal := func(name, n string) error {
		_, err := aqs.Patch(ctx, name, types.MergePatchType,
			[]byte(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"`+n+`"}]}}`), metav1.PatchOptions{})
		return err
	}
	_, err = aqs.Create(ctx, aqtest.Cohort("stand", "root").Budget(gpu, "a100", "10").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aqs.Create(ctx, aqtest.Team("stand-t", "stand").Budget(gpu, "a100", "2").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	require.NoError(t, nominal("stand-t", "4"))
	first := ledger()
	st := standing(first)
	require.Len(t, st, 1, "the raise left no standing reservation: %+v", first.Spec.Reservations)
	require.Equal(t, "stand-a", st[0].Replica)
	reused := a.metric(t, "ome_quota_webhook_ledger_total", `outcome="standing"`)
	for _, n := range []string{"2", "4", "2", "3"} {
		require.NoError(t, nominal("stand-t", n))
	}
	require.Equal(t, reused+2, a.metric(t, "ome_quota_webhook_ledger_total", `outcome="standing"`),
		"the raises within the standing reservation were not admitted under it")
	require.Equal(t, first.ResourceVersion, ledger().ResourceVersion, "a raise within the standing reservation wrote the ledger")

	// A stopped cannot release the reservation; B counts it.
	require.NoError(t, syscall.Kill(a.Pid(), syscall.SIGSTOP))
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = syscall.Kill(a.Pid(), syscall.SIGCONT)
		}
	})
	require.Len(t, standing(ledger()), 1, "A released the reservation before it was stopped")
	bal.backends[0].Store(int64(b.port))
	bal.backends[1].Store(int64(b.port))
	require.NoError(t, nominal("stand-t", "2"))
	sibling := aqtest.Team("stand-u", "stand").Budget(gpu, "a100", "7").Obj() // 2+7 fits 10, 4+7 does not
	_, err = aqs.Create(ctx, sibling, metav1.CreateOptions{})
	require.Error(t, err, "B admitted a sibling that overruns the Cohort beside the team at its standing reservation")
	require.True(t, isRetry(err), "the refusal does not say to retry: %v", err)
	require.Contains(t, err.Error(), "UPDATE stand-t by stand-a")

	require.NoError(t, syscall.Kill(a.Pid(), syscall.SIGCONT))
	stopped = false
	require.NoError(t, retried(ctx, func(ctx context.Context) error {
		_, err := aqs.Create(ctx, sibling, metav1.CreateOptions{})
		return err
	}), "B never admitted the sibling after A ran again")
	led := ledger()
	require.Empty(t, standing(led), "A did not release its standing reservation")
	require.False(t, slices.ContainsFunc(led.Spec.Reservations, func(r v1beta1.Reservation) bool {
		return strings.HasPrefix(r.Node, "stand-t") && r.Replica == "stand-a"
	}))
	require.Greater(t, parseRV(led.Spec.Floor), parseRV(first.Spec.Floor), "releasing did not raise the floor")
}

func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}
