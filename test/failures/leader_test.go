package failures

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/testutil"
)

// TestTwoReplicasOnOneHostOneLeader: two replicas on one host, without
// --leader-election-identity. Their default identities differ (the
// hostname plus a random suffix), so exactly one holds the Lease and
// writes; with the hostname alone, both renewed one Lease as the same
// holder and both led.
func TestTwoReplicasOnOneHostOneLeader(t *testing.T) {
	ctx := context.Background()
	host, err := os.Hostname()
	require.NoError(t, err)
	const lease = "one-host"
	flags := []string{"--webhook=false", "--leader-election-identity=", "--leader-election-id=" + lease,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}
	a := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "host-replica-a", flags...)
	b := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "host-replica-b", flags...)

	leaders := func() (float64, string) {
		la, errA := a.Metric(ctx, "ome_quota_leader")
		lb, errB := b.Metric(ctx, "ome_quota_leader")
		if errA != nil || errB != nil {
			return -1, "scraping: " + strings.TrimSpace(fmtErr(errA)+" "+fmtErr(errB))
		}
		return la + lb, ""
	}
	var holder, renewed string
	testutil.Eventually(t, 60*time.Second, func() string {
		l, err := cluster.Kube.CoordinationV1().Leases("ome").Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			return "no Lease holder yet"
		}
		n, msg := leaders()
		if msg != "" || n != 1 {
			return "leaders: " + msg
		}
		holder, renewed = *l.Spec.HolderIdentity, l.Spec.RenewTime.String()
		return ""
	})
	require.True(t, strings.HasPrefix(holder, host+"_") && len(holder) > len(host)+1, "holder %q: want the hostname %q, an underscore and a suffix", holder, host)

	// Renewals go on (the Lease's renewTime moves) and the other replica
	// still does not lead.
	testutil.Eventually(t, 10*time.Second, func() string {
		l, err := cluster.Kube.CoordinationV1().Leases("ome").Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime.String() == renewed {
			return "no renewal yet"
		}
		return ""
	})
	n, msg := leaders()
	require.Empty(t, msg)
	require.Equal(t, 1.0, n, "replicas leading at once")
	l, err := cluster.Kube.CoordinationV1().Leases("ome").Get(ctx, lease, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, holder, *l.Spec.HolderIdentity)
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
