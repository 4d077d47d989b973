package webhook

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/testutil"
)

// overrunTree is a Cohort of 10 GPUs whose two teams total 12.
func overrunTree(a, b string) string {
	node := func(name, role, parent, nominal string) string {
		return "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: " + name + "\nspec:\n  role: " + role +
			"\n  parentRef:\n    name: " + parent + "\n  budgets:\n    - resourceName: nvidia.com/gpu\n      resourceFlavor: a100\n      nominal: \"" + nominal + "\"\n"
	}
	return strings.Join([]string{
		node("overrun", "Cohort", "root", "10"),
		node("overrun-a", "ClusterQueue", "overrun", a),
		node("overrun-b", "ClusterQueue", "overrun", b),
	}, "---\n")
}

// TestOverrunWrittenWhileWebhookOff writes a tree that breaks containment
// while the webhook is off, then turns it on: a write that lowers the
// overrun is admitted, one that raises it is denied.
func TestOverrunWrittenWhileWebhookOff(t *testing.T) {
	deleteConfig(t)
	off := startReplica(t, "overrun-off", 0)
	out := testutil.MustKubectl(t, cluster, overrunTree("6", "6"), "apply", "-f", "-")
	require.Contains(t, out, "acceleratorquota.ome.io/overrun-b created")
	off.Stop()

	if _, err := cluster.Kube.CoreV1().Secrets(ns).Get(t.Context(), secretName, metav1.GetOptions{}); err != nil {
		createEmptySecret(t)
	}
	port := freePort(t)
	installConfig(t, port)
	startReplica(t, "overrun-on", port)
	t.Cleanup(func() {
		testutil.MustKubectl(t, cluster, "", "delete", "aq", "overrun-a", "overrun-b", "overrun", "--ignore-not-found")
	})

	// 12 -> 11: still over 10, but less.
	out = testutil.MustKubectl(t, cluster, overrunTree("5", "6"), "apply", "-f", "-")
	require.Contains(t, out, "acceleratorquota.ome.io/overrun-a configured")
	// 11 -> 12: more.
	require.Equal(t, "overrun: budget nvidia.com/gpu on a100 is 10 but its children total 12",
		denied(t, overrunTree("5", "7"), "apply", "-f", "-"))
	// Lowering the Cohort's own budget raises the overrun too.
	require.Equal(t, "overrun: budget nvidia.com/gpu on a100 is 9 but its children total 11",
		denied(t, "", "patch", "aq", "overrun", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"9"}]`))
	// A write that leaves the spec alone is not held up by the overrun.
	require.Contains(t, testutil.MustKubectl(t, cluster, "", "label", "aq", "overrun-b", "example.com/touched=yes"), "labeled")
	// Deleting a team shrinks the overrun.
	require.Contains(t, testutil.MustKubectl(t, cluster, "", "delete", "aq", "overrun-b"), "deleted")
}
