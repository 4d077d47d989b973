package testutil

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/localcluster"
)

// NextSecond returns once the clock has reached the next whole second,
// the precision of the times the API server stamps conditions with: what
// keeps two admissions apart in Kueue's order.
func NextSecond(t testing.TB) {
	t.Helper()
	next := time.Now().Truncate(time.Second).Add(time.Second)
	Eventually(t, 5*time.Second, func() string {
		if time.Now().Before(next) {
			return "waiting for the next second"
		}
		return ""
	})
}

// Plan runs kubectl ome quota plan in process against c with args and
// -o json, and returns its exit status and report (nil unless the status
// is 0, 2 or 3).
func Plan(t testing.TB, c *localcluster.Cluster, args ...string) (int, *quotactl.PlanReport) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := quotactl.Run(append([]string{"quota", "plan", "-o", "json", "--kubeconfig", c.Kubeconfig}, args...),
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if code != 0 && code != 2 && code != 3 {
		t.Logf("plan exited %d:\n%s", code, errOut.String())
		return code, nil
	}
	var rep quotactl.PlanReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("plan printed what is not a PlanReport: %v\n%s", err, out.String())
	}
	return code, &rep
}
