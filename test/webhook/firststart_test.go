package webhook

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/testutil"
)

// TestFirstStartCreatesRoot is a first install: root does not exist, and
// the configuration points at a webhook no replica answers yet (in a
// cluster, a Service with no ready endpoint, as a replica is ready only
// once root exists). The configuration's match condition lets the
// manager's plain root through; every other write still fails closed.
func TestFirstStartCreatesRoot(t *testing.T) {
	deleteConfig(t)
	if _, _, err := testutil.RunKubectl(t, cluster, "", "get", "aq", "root"); err == nil {
		testutil.MustKubectl(t, cluster, "", "patch", "aq", "root", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		testutil.MustKubectl(t, cluster, "", "delete", "aq", "root", "--wait")
	}
	if _, err := cluster.Kube.CoreV1().Secrets(ns).Get(t.Context(), secretName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		createEmptySecret(t)
	}
	installConfig(t, freePort(t)) // nothing listens there

	// Root with a budget is not the manager's: it is judged, and fails.
	root := "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: root\nspec:\n  role: Cohort\n"
	_, errOut, err := testutil.RunKubectl(t, cluster, root+"  budgets:\n    - resourceName: nvidia.com/gpu\n      resourceFlavor: a100\n      nominal: \"32\"\n", "create", "-f", "-")
	require.Error(t, err)
	require.Contains(t, errOut, `failed calling webhook "acceleratorquota.ome-quota-manager.validator"`)

	r := startReplica(t, "first-start", freePort(t))
	// The manager creates root in the background, while it reports ready.
	eventually(t, 30*time.Second, func() string {
		if !strings.Contains(r.Tail(200), "created root") {
			return "the manager has not created root yet"
		}
		return ""
	})
	require.Equal(t, "ome.io/accelerator-quota", testutil.MustKubectl(t, cluster, "", "get", "aq", "root", "-o", "jsonpath={.metadata.finalizers[0]}"))
	_, errOut, err = testutil.RunKubectl(t, cluster, "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: team-first\nspec:\n  role: Cohort\n  parentRef:\n    name: root\n", "create", "-f", "-")
	require.Error(t, err)
	require.Contains(t, errOut, `failed calling webhook "acceleratorquota.ome-quota-manager.validator"`)
}
