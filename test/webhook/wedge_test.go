package webhook

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/test/testutil"
)

// TestTwoReplicasWedgeAndRecovery starts two replicas at once on the empty
// Secret (they agree on one certificate), deletes the Secret (no replica is
// ready and every AcceleratorQuota write fails closed), and recovers as the
// guide says: the webhook disabled, writes pass; re-enabled with the Secret
// recreated empty, a replica fills it, injects the CA, becomes ready, and
// admission answers again.
func TestTwoReplicasWedgeAndRecovery(t *testing.T) {
	resetSecret(t)
	portA, portB := freePort(t), freePort(t)
	installConfig(t, portA)

	// Both race to fill the Secret.
	var reps [2]*replica
	var errs [2]error
	var wg sync.WaitGroup
	for i, p := range []int{portA, portB} {
		wg.Go(func() { reps[i], errs[i] = launch(t, []string{"replica-a", "replica-b"}[i], p, nil) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	a, b := reps[0], reps[1]

	sec := getSecret(t)
	require.Equal(t, string(sec.Data["ca.crt"]), string(caBundle(t)))
	// The certificate both serve is the one in the Secret; any other
	// would fail to verify against its CA, or differ.
	eventually(t, 10*time.Second, func() string {
		sec := getSecret(t)
		for _, r := range []*replica{a, b} {
			leaf, err := r.served(t, sec.Data["ca.crt"])
			if err != nil {
				return r.Name + ": " + err.Error()
			}
			if want := string(sec.Data["tls.crt"]); !strings.Contains(want, "CERTIFICATE") || !sameCert(t, want, leaf) {
				return r.Name + " serves a certificate other than the Secret's"
			}
		}
		return ""
	})
	ensureGuideTree(t)

	t.Run("the Secret deleted: the wedge", func(t *testing.T) {
		deleteSecret(t)
		eventually(t, 15*time.Second, func() string {
			for _, r := range []*replica{a, b} {
				if code, body := r.readyz(t); code == 200 || !strings.Contains(body, "Secret ome/ome-quota-manager-webhook-cert does not exist") {
					return r.Name + " /readyz: " + body
				}
			}
			return ""
		})
		// Every create, delete and update of a spec fails closed, dry runs
		// included.
		for _, args := range [][]string{
			{"create", "-f", "-"},
			{"patch", "aq", "team-beta", "--type=merge", "-p", `{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"7"}]}}`},
			{"delete", "aq", "team-beta", "--dry-run=server"},
		} {
			stdin := ""
			if args[0] == "create" {
				stdin = "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: team-wedged\nspec:\n  role: Cohort\n  parentRef:\n    name: root\n"
			}
			out, errOut, err := testutil.RunKubectl(t, cluster, stdin, args...)
			require.Error(t, err, "kubectl %s passed during the wedge: %s", strings.Join(args, " "), out)
			require.True(t, wedged(errOut), "kubectl %s: %s", strings.Join(args, " "), errOut)
		}
		// A label leaves the spec alone, so the API server admits it
		// without calling the webhook, wedged or not.
		require.Contains(t, testutil.MustKubectl(t, cluster, "", "label", "aq", "team-beta", "example.com/wedged=yes"), "labeled")
		// The guide's check that admission answers does not see the wedge:
		// kubectl sends nothing for an unchanged object, so it prints
		// "unchanged (server dry run)" without calling the webhook. A dry
		// run that creates a node does call it.
		out := testutil.MustKubectl(t, cluster, guideTree(t), "apply", "-f", "-", "--dry-run=server")
		require.Contains(t, out, "acceleratorquota.ome.io/team-beta unchanged (server dry run)")
		_, errOut, err := testutil.RunKubectl(t, cluster, probeNode, "create", "-f", "-", "--dry-run=server")
		require.Error(t, err)
		require.True(t, wedged(errOut), errOut)
	})

	t.Run("recovery", func(t *testing.T) {
		// quotaManager.webhook.enabled: false: the chart removes the
		// configuration and restarts the replicas without the webhook.
		deleteConfig(t)
		a.Stop()
		b.Stop()
		off := startReplica(t, "recovery-off", 0)
		out := testutil.MustKubectl(t, cluster, "", "label", "aq", "team-beta", "example.com/recovered=yes")
		require.Contains(t, out, "labeled")

		// Enabled again: the chart recreates the Secret empty and the
		// configuration without a CA bundle, and restarts the replicas.
		createEmptySecret(t)
		port := freePort(t)
		installConfig(t, port)
		require.Empty(t, caBundle(t))
		off.Stop()
		r := startReplica(t, "recovery-on", port)
		sec := getSecret(t)
		for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
			require.NotEmpty(t, sec.Data[k], "Secret key %s", k)
		}
		require.Equal(t, string(sec.Data["ca.crt"]), string(caBundle(t)))

		// The guide's check that admission answers.
		v0 := r.metric(t, "ome_quota_webhook_verdicts_total")
		out = testutil.MustKubectl(t, cluster, guideTree(t), "apply", "-f", "-", "--dry-run=server")
		require.Equal(t, "acceleratorquota.ome.io/ml-research unchanged (server dry run)\n"+
			"acceleratorquota.ome.io/team-alpha unchanged (server dry run)\n"+
			"acceleratorquota.ome.io/team-beta unchanged (server dry run)", strings.TrimSpace(out))
		require.Equal(t, v0, r.metric(t, "ome_quota_webhook_verdicts_total"), "kubectl sent an unchanged object")
		// A dry run that creates a node reaches the webhook.
		require.Equal(t, "acceleratorquota.ome.io/admission-probe created (server dry run)",
			strings.TrimSpace(testutil.MustKubectl(t, cluster, probeNode, "create", "-f", "-", "--dry-run=server")))
		require.Equal(t, v0+1, r.metric(t, "ome_quota_webhook_verdicts_total"))
		// A label does not: its spec is unchanged, so the API server
		// admits it without a call.
		require.Contains(t, testutil.MustKubectl(t, cluster, "", "label", "aq", "team-beta", "example.com/recovered-"), "unlabeled")
		require.Equal(t, v0+1, r.metric(t, "ome_quota_webhook_verdicts_total"), "a label-only write called the webhook")
		// And it judges: a bad write is denied.
		require.Equal(t, "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28",
			denied(t, strings.Replace(guideTree(t), `nominal: "16"`, `nominal: "20"`, 1), "apply", "-f", "-"))
		require.Equal(t, v0+2, r.metric(t, "ome_quota_webhook_verdicts_total"))
	})
}

// probeNode is a node that only a dry run creates: a Cohort under root
// with no budget, which the webhook admits.
const probeNode = "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: admission-probe\nspec:\n  role: Cohort\n  parentRef:\n    name: root\n"

// wedged: kubectl's errOut says that a write failed closed because the
// webhook has no certificate. Either the API server's call failed (a new
// connection finds no certificate to serve), or a connection it opened
// before the Secret went away carried the review and the replica refused
// it as not ready, naming the missing Secret.
func wedged(errOut string) bool {
	return strings.Contains(errOut, `failed calling webhook "acceleratorquota.ome-quota-manager.validator"`) ||
		strings.Contains(errOut, `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request: this replica of the quota manager is not ready`) &&
			strings.Contains(errOut, "Secret ome/ome-quota-manager-webhook-cert does not exist")
}
