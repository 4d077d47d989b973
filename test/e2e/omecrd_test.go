package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/testutil"
)

// TestOMECRD runs on OME's own AcceleratorQuota CRD (OME_E2E_CRD=ome): an
// object the quota manager's types cannot read (a string priorityTier,
// which OME's CRD allows) is reported and skipped, never a wedge of the
// caches; a readable node turned unreadable keeps its last version; and
// status writes leave out the two fields OME's CRD lacks.
func TestOMECRD(t *testing.T) {
	if !omeCRD {
		t.Skip("runs on OME's CRD: OME_E2E_CRD=ome (make test runs the package so once more)")
	}
	ctx := context.Background()
	ensureGuideCluster(t, 4)
	dyn, err := dynamic.NewForConfig(cluster.Config)
	require.NoError(t, err)
	res := dyn.Resource(v1beta1.SchemeGroupVersion.WithResource("acceleratorquotas"))
	tiered := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1beta1.SchemeGroupVersion.String(), "kind": "AcceleratorQuota",
		"metadata": map[string]any{"name": "ome-tiered"},
		"spec": map[string]any{
			"role": "ClusterQueue", "parentRef": map[string]any{"name": "root"}, "priorityTier": "high",
			"budgets": []any{map[string]any{"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "nominal": "1"}},
		},
	}}
	_, err = res.Create(ctx, tiered, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aqs.Create(ctx, aqtest.Team("ome-team", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, n := range []string{"ome-tiered", "ome-team", "ome-other"} {
			if err := res.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	})

	// The caches sync with the unreadable object present.
	m := startManager(t, "ome-crd")
	testutil.WaitMaterialized(t, cluster, "ome-team")
	undecodable := func(name string) float64 {
		return m.metric(ctx, "ome_quota_undecodable_objects", fmt.Sprintf(`name=%q`, name))
	}
	require.Equal(t, 1.0, undecodable("ome-tiered"))
	warning := func(name, says string) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			evs, err := cluster.Kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=Undecodable"})
			if err != nil {
				return err.Error()
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "cannot unmarshal string") && strings.Contains(e.Message, says) {
					return ""
				}
			}
			return fmt.Sprintf("no Undecodable Event on %s saying %q: %+v", name, says, evs.Items)
		})
	}
	warning("ome-tiered", "leaves it out of the tree")
	_, err = cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "ome-tiered", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "an unreadable node is not materialized: %v", err)

	t.Run("kubectl ome quota tree leaves it out and says so", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := quotactl.Run([]string{"quota", "tree", "--kubeconfig", cluster.Kubeconfig}, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
		require.Equal(t, quotactl.ExitClean, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
		require.Contains(t, out.String(), "ome-team")
		require.NotContains(t, out.String(), "ome-tiered")
		require.Contains(t, errOut.String(), "Warning: AcceleratorQuota ome-tiered cannot be read (json: cannot unmarshal string")
	})

	t.Run("status writes leave out what the CRD lacks", func(t *testing.T) {
		for _, f := range []string{"status.summary", "status.unbudgeted"} {
			require.Equal(t, 1.0, m.metric(ctx, "ome_quota_status_fields_unwritten", fmt.Sprintf(`field=%q`, f)))
		}
		log, err := os.ReadFile(m.Log)
		require.NoError(t, err)
		line := ""
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "the installed AcceleratorQuota CRD does not declare these status fields, so status writes leave them out") {
				line = l
			}
		}
		require.Contains(t, line, "status.summary")
		require.Contains(t, line, "status.unbudgeted")
		u, err := res.Get(ctx, "ome-team", metav1.GetOptions{})
		require.NoError(t, err)
		budgets, _, _ := unstructured.NestedSlice(u.Object, "status", "budgets")
		require.Len(t, budgets, 1)
		_, has := u.Object["status"].(map[string]any)["summary"]
		require.False(t, has)
		require.Zero(t, m.metric(ctx, "ome_quota_backend_write_errors_total", `kind="status"`), "a status write was refused")
	})

	t.Run("a node turned unreadable keeps its last version", func(t *testing.T) {
		_, err := res.Patch(ctx, "ome-team", types.MergePatchType, []byte(`{"spec":{"priorityTier":"high","budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"2"}]}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		warning("ome-team", "keeps acting on its last readable version")
		require.Equal(t, 1.0, undecodable("ome-team"))
		// A later change is applied, so the manager has passed over the
		// tree since; the unreadable team is still there, as it was.
		_, err = aqs.Create(ctx, aqtest.Team("ome-other", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		testutil.WaitMaterialized(t, cluster, "ome-other")
		cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "ome-team", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "1", cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota.String())
	})

	t.Run("fixed, both are read again", func(t *testing.T) {
		for _, n := range []string{"ome-tiered", "ome-team"} {
			_, err := res.Patch(ctx, n, types.MergePatchType, []byte(`{"spec":{"priorityTier":null}}`), metav1.PatchOptions{})
			require.NoError(t, err)
		}
		testutil.WaitMaterialized(t, cluster, "ome-tiered")
		eventually(t, 30*time.Second, func() string {
			cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, "ome-team", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if q := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota.String(); q != "2" {
				return "ome-team's ClusterQueue has nominal " + q
			}
			return ""
		})
		require.Zero(t, undecodable("ome-tiered")+undecodable("ome-team"))
	})
}
