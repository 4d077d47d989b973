package webhook

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestOnlyLabelledObjectsAreWritten: the manager only ever writes objects
// that carry ome.io/quota-managed-by. A Secret or a webhook configuration
// without the label is left untouched, and the replica says why it is not
// ready; once labelled, both are filled and the replica becomes ready.
func TestOnlyLabelledObjectsAreWritten(t *testing.T) {
	ctx := context.Background()
	port := freePort(t)
	resetSecret(t)
	installConfig(t, port)
	unlabel := func(kind, name string, namespaced bool) {
		args := []string{"label", kind, name, "ome.io/quota-managed-by-"}
		if namespaced {
			args = append(args, "-n", ns)
		}
		testutil.MustKubectl(t, cluster, "", args...)
	}
	unlabel("secret", secretName, true)
	unlabel("validatingwebhookconfiguration", configName, false)

	m := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "unlabelled", localcluster.WebhookFlags(port)...)
	r := &replica{Manager: m, port: port}
	waitNotReady := func(want string) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			code, body := r.readyz(t)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
				return "readyz: " + body
			}
			return ""
		})
	}
	waitNotReady("Secret ome/" + secretName + " lacks the label ome.io/quota-managed-by=ome-quota-manager")
	require.Empty(t, getSecret(t).Data, "an unlabelled Secret was written")

	testutil.MustKubectl(t, cluster, "", "label", "secret", "-n", ns, secretName, "ome.io/quota-managed-by=ome-quota-manager")
	waitNotReady("ValidatingWebhookConfiguration " + configName + " lacks the label")
	require.NotEmpty(t, getSecret(t).Data["tls.crt"], "the labelled Secret was not filled")
	require.Empty(t, caBundle(t), "an unlabelled ValidatingWebhookConfiguration was written")

	testutil.MustKubectl(t, cluster, "", "label", "validatingwebhookconfiguration", configName, "ome.io/quota-managed-by=ome-quota-manager")
	eventually(t, 30*time.Second, func() string {
		if code, body := r.readyz(t); code != http.StatusOK {
			return "readyz: " + body
		}
		return ""
	})
	require.NotEmpty(t, caBundle(t))
	_, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.NoError(t, err)
}
