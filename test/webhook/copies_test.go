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
		if out, _, _ := kubectl(t, "", "get", "aq", "root", "-o", capacityJSONPath); !strings.Contains(out, "nvidia.com/gpu a100") {
			return "root's capacity: " + out
		}
		return ""
	})
	const plane = "--as=system:serviceaccount:ome:plane"
	copyOf := "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: team-copy\n  labels:\n    ome.io/quota-origin: plane-1\n" +
		"spec:\n  role: ClusterQueue\n  parentRef:\n    name: root\n  budgets:\n    - resourceName: nvidia.com/gpu\n      resourceFlavor: a100\n      nominal: \"1\"\n"
	t.Cleanup(func() { kubectl(t, "", plane, "delete", "aq", "team-copy", "--ignore-not-found") })

	const refusal = `team-copy is a copy of a fleet node, projected by management plane "plane-1": only the plane changes it (system:serviceaccount:ome:plane); change the node on the plane`
	require.Equal(t, refusal, denied(t, copyOf, "create", "-f", "-"), "an admin forging a copy")
	mustKubectl(t, copyOf, plane, "create", "-f", "-")
	require.Equal(t, refusal, denied(t, "", "label", "aq", "team-copy", "team=x"), "an admin labelling a copy")
	require.Equal(t, refusal, denied(t, "", "label", "aq", "team-copy", "ome.io/quota-origin-"), "an admin unmarking a copy")
	require.Equal(t, refusal, denied(t, "", "patch", "aq", "team-copy", "--type=merge", "-p", `{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"2"}]}}`), "an admin raising a copy")
	require.Equal(t, refusal, denied(t, "", "delete", "aq", "team-copy"), "an admin deleting a copy")
	mustKubectl(t, "", plane, "label", "aq", "team-copy", "team=x")
	mustKubectl(t, "", plane, "delete", "aq", "team-copy")
}
