package webhook

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"ome.io/quota-manager/test/testutil"
)

// On a member cluster, the copies a management plane projects there are
// the plane's alone: through the real API server and its match
// conditions, an admin can neither forge one, nor edit, relabel, unmark
// or delete one, while the plane's identity (here impersonated) can.
func TestOnlyThePlaneWritesCopies(t *testing.T) {
	resetSecret(t)
	port := freePort(t)
	installConfig(t, port)
	startReplica(t, "copies", port, "--webhook-projection-writers=system:serviceaccount:ome:plane")
	testutil.GrantClusterRole(t, cluster, "plane-copies", "ome", "plane",
		rbacv1.PolicyRule{APIGroups: []string{"ome.io"}, Resources: []string{"acceleratorquotas"}, Verbs: []string{"create", "get", "patch", "update", "delete"}})
	eventually(t, 30*time.Second, func() string {
		if out, _, _ := testutil.RunKubectl(t, cluster, "", "get", "aq", "root", "-o", capacityJSONPath); !strings.Contains(out, "nvidia.com/gpu a100") {
			return "root's capacity: " + out
		}
		return ""
	})
	const plane = "--as=system:serviceaccount:ome:plane"
	copyOf := "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: team-copy\n  labels:\n    ome.io/quota-origin: plane-1\n" +
		"spec:\n  role: ClusterQueue\n  parentRef:\n    name: root\n  budgets:\n    - resourceName: nvidia.com/gpu\n      resourceFlavor: a100\n      nominal: \"1\"\n"
	t.Cleanup(func() { testutil.RunKubectl(t, cluster, "", plane, "delete", "aq", "team-copy", "--ignore-not-found") })

	const refusal = `team-copy is a copy of a fleet node, projected by management plane "plane-1": only the plane changes it (system:serviceaccount:ome:plane); change the node on the plane`
	require.Equal(t, refusal, denied(t, copyOf, "create", "-f", "-"), "an admin forging a copy")
	testutil.MustKubectl(t, cluster, copyOf, plane, "create", "-f", "-")
	require.Equal(t, refusal, denied(t, "", "label", "aq", "team-copy", "team=x"), "an admin labelling a copy")
	require.Equal(t, refusal, denied(t, "", "label", "aq", "team-copy", "ome.io/quota-origin-"), "an admin unmarking a copy")
	require.Equal(t, refusal, denied(t, "", "patch", "aq", "team-copy", "--type=merge", "-p", `{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"2"}]}}`), "an admin raising a copy")
	require.Equal(t, refusal+"; a copy of a plane that no longer reaches this cluster is removed by whoever may release it (cluster-admin may): kubectl ome quota release --origin plane-1",
		denied(t, "", "delete", "aq", "team-copy"), "an admin deleting a copy")
	testutil.MustKubectl(t, cluster, "", plane, "label", "aq", "team-copy", "team=x")
	testutil.MustKubectl(t, cluster, "", plane, "delete", "aq", "team-copy")

	// The release (kubectl ome quota release): a user who may update and
	// delete AcceleratorQuotas but not "release" them can neither mark a
	// copy nor delete it; the cluster's admin marks it, then deletes it.
	testutil.MustKubectl(t, cluster, copyOf, plane, "create", "-f", "-")
	const bob = "system:serviceaccount:ome:bob"
	testutil.GrantClusterRole(t, cluster, "copies-editor", "ome", "bob",
		rbacv1.PolicyRule{APIGroups: []string{"ome.io"}, Resources: []string{"acceleratorquotas"}, Verbs: []string{"get", "patch", "update", "delete"}})
	const mark = "ome.io/quota-release=plane-1"
	require.Equal(t, refusal+"; "+bob+` may not release it either: releasing a copy needs the verb "release" on acceleratorquotas.ome.io`,
		denied(t, "", "--as="+bob, "annotate", "aq", "team-copy", mark), "a user who may not release marking a copy")
	require.Equal(t, refusal, denied(t, "", "annotate", "aq", "team-copy", "ome.io/quota-release=plane-2"), "an admin marking a copy with another origin")
	testutil.MustKubectl(t, cluster, "", "annotate", "aq", "team-copy", mark)
	require.Contains(t, denied(t, "", "--as="+bob, "delete", "aq", "team-copy"), bob+" may not release it either", "a user who may not release deleting a marked copy")
	testutil.MustKubectl(t, cluster, "", "delete", "aq", "team-copy")
	_, _, err := testutil.RunKubectl(t, cluster, "", "get", "aq", "team-copy")
	require.Error(t, err, "the released copy is gone")
}
