package failures

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	quotaclient "ome.io/quota-manager/api/client"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// manyNodes is enough Nodes that the informer's initial list takes the
// event handler a while after the cache reports synced.
const manyNodes = 3000

func readyz(t *testing.T, m *localcluster.Manager) (int, string) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", m.HealthPort))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMissingKueueCRDs: Kueue's CRDs that the manager watches are missing
// when it starts.
// The replica is not ready, and /readyz, the log and the webhook's refusal
// name the missing API group and resources and say what to do; the
// refusal is a denial kubectl prints, not "the server is currently unable
// to handle the request". Once the CRDs appear, the replica is ready
// within seconds.
func TestMissingKueueCRDs(t *testing.T) {
	ctx := context.Background()
	ext, err := apiextensions.NewForConfig(cluster.Config)
	require.NoError(t, err)
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	all, err := crds.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var kueueCRDs []apiextensionsv1.CustomResourceDefinition
	watched := map[string]bool{"clusterqueues": true, "cohorts": true, "localqueues": true, "resourceflavors": true}
	for _, c := range all.Items {
		if c.Spec.Group == kueuev1beta2.GroupVersion.Group && watched[c.Spec.Names.Plural] {
			kueueCRDs = append(kueueCRDs, c)
		}
	}
	require.Len(t, kueueCRDs, len(watched))
	require.NotEmpty(t, kueueCRDs)
	restore := func() {
		for _, c := range kueueCRDs {
			c := c.DeepCopy()
			c.ObjectMeta = metav1.ObjectMeta{Name: c.Name, Labels: c.Labels, Annotations: c.Annotations}
			c.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
			if _, err := crds.Create(context.Background(), c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("recreating CRD %s: %v", c.Name, err)
			}
		}
	}
	for _, c := range kueueCRDs {
		require.NoError(t, crds.Delete(ctx, c.Name, metav1.DeleteOptions{}))
	}
	t.Cleanup(restore)
	testutil.Eventually(t, 90*time.Second, func() string {
		for _, c := range kueueCRDs {
			if got, err := crds.Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("CRD %s still there: %v, deleted at %v, finalizers %v", c.Name, err, got.DeletionTimestamp, got.Finalizers)
			}
		}
		return ""
	})

	webhookFlags := testutil.InstallWebhook(t, cluster)
	t.Cleanup(func() {
		_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "ome-quota-manager.ome.io", metav1.DeleteOptions{})
	})
	m := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "no-kueue-crds", webhookFlags...)

	const missing = "Kueue's CRDs are missing: the API server does not serve kueue.x-k8s.io/v1beta2 clusterqueues, cohorts, localqueues, resourceflavors; install Kueue v0.17 or newer"
	testutil.Eventually(t, 30*time.Second, func() string {
		if code, body := readyz(t, m); code != http.StatusServiceUnavailable || !strings.Contains(body, missing) {
			return fmt.Sprintf("/readyz %d: %s", code, body)
		}
		return ""
	})
	logged, err := os.ReadFile(m.Log)
	require.NoError(t, err)
	require.Contains(t, string(logged), missing, "the log names the missing CRDs")

	// A write reaches the webhook, whose TLS works: the denial carries the
	// cause and the fix.
	team := "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: crds-missing-team\nspec:\n  role: Cohort\n  parentRef:\n    name: root\n"
	f := t.TempDir() + "/team.yaml"
	require.NoError(t, os.WriteFile(f, []byte(team), 0o600))
	testutil.Eventually(t, 30*time.Second, func() string {
		_, stderr, err := cluster.KubectlOutput(ctx, "create", "-f", f)
		if err == nil {
			return "the write was admitted by a replica that is not ready"
		}
		if !strings.Contains(stderr, `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request: this replica of the quota manager is not ready, so it cannot judge the write: `+missing) {
			return "kubectl: " + stderr
		}
		return ""
	})
	_, stderr, _ := cluster.KubectlOutput(ctx, "create", "-f", f)
	require.NotContains(t, stderr, "the server is currently unable to handle the request")
	t.Logf("kubectl prints: %s", strings.TrimSpace(stderr))

	// The CRDs appear: the replica starts within seconds.
	restore()
	appeared := time.Now()
	testutil.Eventually(t, 20*time.Second, func() string {
		if code, body := readyz(t, m); code != http.StatusOK {
			return fmt.Sprintf("/readyz %d: %s", code, body)
		}
		return ""
	})
	t.Logf("ready %s after Kueue's CRDs were created", time.Since(appeared).Round(100*time.Millisecond))
	_, _, err = cluster.KubectlOutput(ctx, "create", "-f", f)
	require.NoError(t, err, "the ready replica admits the write")
	require.NoError(t, aqDelete(ctx, "crds-missing-team"))
}

// managedFieldsOf reports whether manager has written root's status.
func managedFieldsOf(aq *v1beta1.AcceleratorQuota, manager string) bool {
	for _, f := range aq.ManagedFields {
		if f.Manager == manager && f.Subresource == "status" {
			return true
		}
	}
	return false
}

func aqDelete(ctx context.Context, name string) error {
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	if err != nil {
		return err
	}
	return aqs.Delete(ctx, name, metav1.DeleteOptions{})
}
