package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// Short lease timings, so that a handover takes seconds.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// managerProc is a manager process bound to a test.
type managerProc struct {
	*localcluster.Manager
	t *testing.T
}

func startManager(t *testing.T, name string, extra ...string) *managerProc {
	t.Helper()
	args := append([]string{
		"--enrolled-namespaces=ml-serving",
		"--leader-election-lease-duration=" + leaseDuration.String(),
		"--leader-election-renew-deadline=" + renewDeadline.String(),
		"--leader-election-retry-period=" + retryPeriod.String(),
		"--capacity-report-interval=3s",
		// The webhook has its own e2e package (test/webhook).
		"--webhook=false",
		"-v=2",
	}, extra...)
	return &managerProc{Manager: testutil.StartManager(t, cluster, cluster.ManagerBin, name, args...), t: t}
}

func (p *managerProc) kill() { p.Kill() }

func (p *managerProc) metric(ctx context.Context, family string, match ...string) float64 {
	p.t.Helper()
	v, err := p.Metric(ctx, family, match...)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// waitTicks waits until p has applied n more ticks than now: each is a
// pass of the full comparison over the tree, so a check that nothing was
// written after it proves something.
func (p *managerProc) waitTicks(ctx context.Context, n int) {
	p.t.Helper()
	from := p.metric(ctx, "ome_quota_events_total", `kind="Tick"`)
	eventually(p.t, time.Duration(n+1)*10*time.Second, func() string {
		if got := p.metric(ctx, "ome_quota_events_total", `kind="Tick"`); got < from+float64(n) {
			return fmt.Sprintf("%s applied %v of %d ticks", p.Name, got-from, n)
		}
		return ""
	})
}
