package helm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/localcluster"
)

// The guide's helm commands, as written.
const (
	installClientSide = "helm install ome-quota-manager ./charts/ome-quota-manager --namespace ome -f quota-values.yaml --server-side=false"
	installServerSide = "helm install ome-quota-manager ./charts/ome-quota-manager --namespace ome -f quota-values.yaml"
	upgrade           = "helm upgrade ome-quota-manager ./charts/ome-quota-manager --namespace ome -f quota-values.yaml"
	uninstall         = "helm uninstall ome-quota-manager -n ome"
)

// workdir is a folder laid out like the guide's OME checkout: ./charts is
// this repository's, quota-values.yaml the file the guide edits.
type workdir struct {
	dir string
	env []string
}

func newWorkdir(t *testing.T) *workdir {
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(root, "charts"), filepath.Join(dir, "charts")))
	home := t.TempDir()
	return &workdir{dir: dir, env: []string{
		"KUBECONFIG=" + cluster.Kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}}
}

// values writes the guide's values file of that name (from the chart
// tests' testdata) as quota-values.yaml.
func (w *workdir) values(t *testing.T, name string) {
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "test", "chart", "testdata", name))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(w.dir, "quota-values.yaml"), data, 0o644))
}

// helm runs a guide command line (it has no quoted words) with the built
// binary and returns its combined output; it must succeed.
func (w *workdir) helm(t *testing.T, line string) string {
	t.Helper()
	out, err := w.run(t, line)
	require.NoError(t, err, "%s:\n%s", line, out)
	return out
}

// helmFails runs a command line that must fail, and returns its output.
func (w *workdir) helmFails(t *testing.T, line string) string {
	t.Helper()
	out, err := w.run(t, line)
	require.Error(t, err, "%s:\n%s", line, out)
	return out
}

func (w *workdir) run(t *testing.T, line string) (string, error) {
	args := strings.Fields(line)
	require.Equal(t, "helm", args[0])
	cmd := exec.Command(helmBin, args[1:]...)
	cmd.Dir, cmd.Env = w.dir, append(os.Environ(), w.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// aggregate does what kube-controller-manager's ClusterRole aggregation
// controller does (there is no controller manager here): it fills view,
// edit and admin with the rules of the ClusterRoles their aggregation rule
// selects.
func aggregate(ctx context.Context, t *testing.T) {
	t.Helper()
	crs := cluster.Kube.RbacV1().ClusterRoles()
	for _, name := range []string{"view", "edit", "admin"} {
		cr, err := crs.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, cr.AggregationRule, "the built-in %s ClusterRole aggregates", name)
		var rules []rbacv1.PolicyRule
		for _, s := range cr.AggregationRule.ClusterRoleSelectors {
			sel, err := metav1.LabelSelectorAsSelector(&s)
			require.NoError(t, err)
			list, err := crs.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			require.NoError(t, err)
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			for _, m := range list.Items {
				rules = append(rules, m.Rules...)
			}
		}
		cr.Rules = rules
		_, err = crs.Update(ctx, cr, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
}
