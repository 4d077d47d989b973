package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
	"ome.io/quota-manager/webhook"
)

// saveLogEnv names a folder to copy TestAuditTrail's recorded log into: how
// replay/testdata/guide is made (see replay's golden tests).
const saveLogEnv = "OME_E2E_SAVE_EVENT_LOG"

// TestAuditTrail records the guide's scenarios with the admission webhook
// on: the tree applied, team-alpha lowered and raised again, its raise to
// 20 denied, a Node deleted and big frozen, big repaired, then the webhook
// turned off (the guide's way out of a wedge) and team-beta lowered. The
// replay of the log names the user who changed team-alpha (the one kubectl
// runs as) as the author of each write that landed, shows the denial as a
// request, flags team-beta's write as unjudged,
// explains the freeze by the Node deletion, and leaves the Kueue objects
// that the API server holds.
func TestAuditTrail(t *testing.T) {
	ctx := context.Background()
	ensureGuideCluster(t, 4)
	if err := cluster.CreateWebhookSecret(ctx); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	port, err := localcluster.FreePort()
	require.NoError(t, err)
	deleteWebhookConfig := func() {
		err := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, webhook.DefaultConfigName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	deleteWebhookConfig()
	require.NoError(t, cluster.CreateWebhookConfig(ctx, port))
	t.Cleanup(deleteWebhookConfig)

	dir := filepath.Join(t.TempDir(), "events")
	m := startManager(t, "trail", append([]string{"--webhook=true", "--event-log=" + dir}, localcluster.WebhookFlags(port)...)...)
	user := strings.TrimSpace(testutil.Kubectl(t, cluster, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"))
	require.NotEmpty(t, user)

	testutil.KubectlEquals(t, cluster, 30*time.Second, "google.com/tpu a100 0 0\nnvidia.com/gpu a100 32 32", "get", "aq", "root", "-o", capacityJSONPath)
	testutil.Kubectl(t, cluster, "apply", "-f", "../../config/samples/quota-tree.yaml")
	setAlpha := func(n string) (string, error) {
		_, stderr, err := cluster.KubectlOutput(ctx, "patch", "aq", "team-alpha", "--type=json",
			"-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"`+n+`"}]`)
		return stderr, err
	}
	for _, n := range []string{"12", "16"} {
		stderr, err := setAlpha(n)
		require.NoError(t, err, stderr)
	}
	stderr, err := setAlpha("20")
	require.Error(t, err, "raising team-alpha to 20 was admitted")
	require.Contains(t, stderr, `denied the request: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28`)

	// A Node deleted: the mark falls to 24 and big (28) freezes big-team.
	big := "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: big\nspec:\n  role: Cohort\n  parentRef:\n    name: root\n" +
		"  budgets:\n    - resourceName: nvidia.com/gpu\n      resourceFlavor: a100\n      nominal: \"28\"\n---\n" +
		"apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: big-team\nspec:\n  role: ClusterQueue\n  parentRef:\n    name: big\n" +
		"  budgets:\n    - resourceName: nvidia.com/gpu\n      resourceFlavor: a100\n      nominal: \"20\"\n"
	bigFile := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(bigFile, []byte(big), 0o600))
	testutil.Kubectl(t, cluster, "apply", "-f", bigFile)
	testutil.WaitMaterialized(t, cluster, "big", "big-team")
	require.NoError(t, cluster.Kube.CoreV1().Nodes().Delete(ctx, "gpu-node-4", metav1.DeleteOptions{}))
	readyReasons := func(want string) func() string {
		return func() string {
			got := strings.TrimSpace(testutil.Kubectl(t, cluster, "get", "aq", "big", "big-team", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].reason}{" "}{end}`))
			if got != want {
				return fmt.Sprintf("Ready reasons of big and big-team: %q, want %q", got, want)
			}
			return ""
		}
	}
	eventually(t, 30*time.Second, readyReasons("CapacityExceeded Frozen"))
	// Repaired: big lowered to the new mark.
	testutil.Kubectl(t, cluster, "patch", "aq", "big", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"24"}]`)
	eventually(t, 30*time.Second, readyReasons("Admitted Admitted"))
	testutil.WaitMaterialized(t, cluster, "big", "big-team")
	// The guide's way out of a wedged webhook: turn it off. A write then
	// lands unjudged, and the audit trail says so.
	deleteWebhookConfig()
	// The API server drops the webhook a moment later: once a dry run
	// leaves the webhook's verdict count alone.
	eventually(t, 30*time.Second, func() string {
		before := m.metric(ctx, "ome_quota_webhook_verdicts_total")
		testutil.Kubectl(t, cluster, "patch", "aq", "team-beta", "--dry-run=server", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"7"}]`)
		if m.metric(ctx, "ome_quota_webhook_verdicts_total") != before {
			return "the API server still calls the webhook"
		}
		return ""
	})
	testutil.Kubectl(t, cluster, "patch", "aq", "team-beta", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"6"}]`)
	eventually(t, 30*time.Second, func() string {
		if !strings.Contains(replayCmd(t, dir, "--node", "team-beta", "--history"), "nominal 8 -> 6") {
			return "the write of team-beta is not in the log yet"
		}
		return ""
	})
	testutil.WaitMaterialized(t, cluster, "team-beta")
	// Every status caught up with the state before the stop (a status
	// follows a usage change of its ClusterQueue within a second), so that
	// the last statuses written are those of the log's end: the very
	// bytes, every stamp included (lastTransitionTime, observedAt).
	eventually(t, 30*time.Second, func() string {
		if _, diff := statusesDiffer(t, dir); diff != "" {
			return "the statuses in the API server are not yet the replay's (-replay +API server):\n" + diff
		}
		return ""
	})
	m.Stop()
	require.Equal(t, 0, m.ExitCode())

	// Who changed team-alpha, and the denial of its raise to 20. Each
	// admitted verdict is matched with the write that landed (its uid, its
	// base version, its spec), and that write names the user as its
	// author. (A judgement the API server made again on a newer version,
	// after a status write, shows as claimed beside the one that landed.)
	trail := replayCmd(t, dir, "--node", "team-alpha", "--history")
	authored := func(op, changes string) {
		t.Helper()
		verdict := regexp.MustCompile(`(?m)^\d+:\d+\s+\S+\s+` + regexp.QuoteMeta(user) + `\s+` + op +
			` admitted by trail, landed as #(\d+) ` + regexp.QuoteMeta("["+changes+"]") + `$`)
		m := verdict.FindStringSubmatch(trail)
		require.NotNil(t, m, "replay --node team-alpha --history names %s as the author of %s [%s]:\n%s", user, op, changes, trail)
		write := regexp.MustCompile(`(?m)^` + m[1] + `\s+\S+\s+` + regexp.QuoteMeta(user) +
			`\s+AcceleratorQuota team-alpha written \(generation \d+\) ` + regexp.QuoteMeta("["+changes+"]") + `$`)
		require.Regexp(t, write, trail, "the write #%s names %s as its author", m[1], user)
	}
	// team-alpha may exist before this manager starts (the package's other
	// tests write the guide's tree), so only its updates are checked.
	authored("UPDATE", "nvidia.com/gpu@a100 nominal 16 -> 12")
	authored("UPDATE", "nvidia.com/gpu@a100 nominal 12 -> 16")
	require.Regexp(t, regexp.QuoteMeta(user)+`\s+`+regexp.QuoteMeta(
		"UPDATE request denied by trail: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28 [nvidia.com/gpu@a100 nominal 16 -> 20]"),
		trail, "replay --node team-alpha --history")
	require.NotContains(t, trail, "unverified", "a log recorded now ties each verdict to its write")

	require.Contains(t, replayCmd(t, dir, "--node", "team-beta", "--history"),
		"[nvidia.com/gpu@a100 nominal 8 -> 6] (no admitted verdict in the logs read matches it: written while the webhook was off")

	// The freeze, explained by the Node deletion, and the repair.
	timeline := replayTimeline(t, dir)
	var frozeAt, repairedAt uint64
	for _, e := range timeline {
		switch {
		case e.Node == "big" && e.To == "CapacityExceeded":
			frozeAt = e.Seq
			require.Contains(t, e.Cause, "Node gpu-node-4 deleted")
		case e.Node == "big-team" && e.To == "Ready" && frozeAt != 0:
			repairedAt = e.Seq
			require.Contains(t, e.Cause, "AcceleratorQuota big written")
		}
	}
	require.NotZero(t, frozeAt, "no freeze in the timeline: %+v", timeline)
	require.NotZero(t, repairedAt, "no repair in the timeline: %+v", timeline)
	why := replayCmd(t, dir, "--why", "big-team", "--at", strconv.FormatUint(frozeAt, 10))
	require.Contains(t, why, fmt.Sprintf("big-team is Frozen since #%d", frozeAt))
	require.Contains(t, why, "Node gpu-node-4 deleted")
	require.Contains(t, why, "the high-water mark of nvidia.com/gpu@a100 fell from 32 to 24")
	require.Regexp(t, `quota big gen=\d+ phase=Ready`, replayCmd(t, dir, "--at", strconv.FormatUint(frozeAt-1, 10), "--state"))
	require.Regexp(t, `quota big-team gen=\d+ phase=Frozen`, replayCmd(t, dir, "--at", strconv.FormatUint(frozeAt, 10), "--state"))
	require.Contains(t, checkObjects(t, dir), "ClusterQueue/big-team")
	// The statuses too, Materialized included: the leader's outcomes are
	// in the log.
	require.Contains(t, checkStatuses(t, dir), "big-team")
	require.Contains(t, replayCmd(t, dir, "--state"), "Materialized=True Admitted", "replay --state")

	if to := os.Getenv(saveLogEnv); to != "" {
		require.NoError(t, os.RemoveAll(to))
		out, err := exec.Command("cp", "-r", dir, to).CombinedOutput()
		require.NoError(t, err, string(out))
		t.Logf("the recorded log is copied to %s", to)
	}
}
