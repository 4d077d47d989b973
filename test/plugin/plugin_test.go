package plugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
	"ome.io/quota-manager/test/testutil/golden"
)

const (
	guideTree = "../../config/samples/quota-tree.yaml"
	treeCols  = `custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,MATERIALIZED:.status.conditions[?(@.type=="Materialized")].status`
)

// result is one run of the plugin.
type result struct {
	code        int
	out, errOut string
}

// ome runs `kubectl ome` in process against the cluster.
func ome(args ...string) result {
	return omeWith(append(args, "--kubeconfig", cluster.Kubeconfig)...)
}

// omeWith runs `kubectl ome` in process with exactly args.
func omeWith(args ...string) result {
	var in, out, errOut bytes.Buffer
	code := quotactl.Run(args, genericiooptions.IOStreams{In: &in, Out: &out, ErrOut: &errOut})
	return result{code, out.String(), errOut.String()}
}

var (
	agoRE      = regexp.MustCompile(`measured \d+[smhd] ago`)
	stampRE    = regexp.MustCompile(`\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)`)
	jsonTimeRE = regexp.MustCompile(`"observedAt": "[^"]*"`)
	jsonAgeRE  = regexp.MustCompile(`"age": "[^"]*"`)
	yamlTimeRE = regexp.MustCompile(`observedAt: "?[0-9TZ:-]+"?`)
	yamlAgeRE  = regexp.MustCompile(`age: \S+`)
)

// normalizeTimes replaces the ages and times that change from run to run.
func normalizeTimes(s string) string {
	s = agoRE.ReplaceAllString(s, "measured <age> ago")
	s = stampRE.ReplaceAllString(s, "(<time>)")
	s = jsonTimeRE.ReplaceAllString(s, `"observedAt": "<time>"`)
	s = jsonAgeRE.ReplaceAllString(s, `"age": "<age>"`)
	s = yamlTimeRE.ReplaceAllString(s, "observedAt: <time>")
	return yamlAgeRE.ReplaceAllString(s, "age: <age>")
}

// check compares got, its times normalized, with testdata/name.
func check(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, name, normalizeTimes(got))
}

// markIs waits until root's high-water mark of nvidia.com/gpu on h100 is
// want.
func markIs(t *testing.T, want string) {
	t.Helper()
	testutil.KubectlEquals(t, cluster, 30*time.Second, want, "get", "aq", "root", "-o",
		`jsonpath={range .status.capacity[?(@.resourceFlavor=="h100")]}{.resourceName}={.highWaterMark}{"\n"}{end}`)
}

// startManager starts the quota manager with its webhook, Kueue objects in
// ml-serving, and a 3 s report interval.
func startManager(t *testing.T) {
	t.Helper()
	args := append([]string{"--enrolled-namespaces=ml-serving", "--capacity-report-interval=3s", "-v=1"}, testutil.InstallWebhook(t, cluster)...)
	testutil.StartManager(t, cluster, cluster.ManagerBin, "m1", args...)
}

// writeFile writes content to a file in a test folder.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

// TestPlugin walks the plugin through the guide's tree and a freeze, in
// order, against one manager.
func TestPlugin(t *testing.T) {
	ctx := context.Background()
	startManager(t)
	testutil.KubectlEquals(t, cluster, 30*time.Second, "google.com/tpu a100 0 0\nnvidia.com/gpu a100 32 32", "get", "aq", "root", "-o",
		`jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.allocatable}{" "}{.highWaterMark}{"\n"}{end}`)
	_, err := cluster.Kubectl(ctx, "apply", "-f", guideTree)
	require.NoError(t, err)
	testutil.KubectlEquals(t, cluster, 30*time.Second, `NAME READY MATERIALIZED
ml-research True True
root True True
team-alpha True True
team-beta True True`, "get", "aq", "-o", treeCols)

	t.Run("tree of the guide's tree, golden", func(t *testing.T) {
		for _, c := range []struct {
			file string
			args []string
		}{
			{"tree.txt", nil},
			{"tree-wide.txt", []string{"--wide"}},
			{"tree.json", []string{"-o", "json"}},
			{"tree.yaml", []string{"-o", "yaml"}},
			{"tree-ml-research.txt", []string{"ml-research"}},
		} {
			r := ome(append([]string{"quota", "tree"}, c.args...)...)
			require.Equal(t, 0, r.code, r.errOut)
			require.Empty(t, r.errOut)
			check(t, c.file, r.out)
		}
	})

	t.Run("kubectl finds the plugin on PATH", func(t *testing.T) {
		dir := t.TempDir()
		_, err := localcluster.BuildPlugin(context.Background(), dir)
		require.NoError(t, err)
		cmd := exec.Command(filepath.Join(cluster.BinDir, "kubectl"), "ome", "quota", "tree", "--kubeconfig", cluster.Kubeconfig)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		got, err := cmd.Output()
		require.NoError(t, err)
		check(t, "tree.txt", string(got))
	})

	t.Run("status team-beta shows the guide's conditions and matching objects", func(t *testing.T) {
		r := ome("quota", "status", "team-beta")
		require.Equal(t, 0, r.code, r.errOut)
		require.Contains(t, r.out, `  Ready=True Admitted: node is a valid member of the quota tree
  Degraded=False Admitted: no invariant violated
  Materialized=True Admitted: enforcement objects match this node's budget
`)
		require.Contains(t, r.out, "ClusterQueue team-beta: Matches\n")
		require.Contains(t, r.out, "LocalQueue ml-serving/team-beta: Matches\n")
		check(t, "status-team-beta.txt", r.out)
		y := ome("quota", "status", "team-beta", "-o", "yaml")
		require.Equal(t, 0, y.code, y.errOut)
		require.Contains(t, y.out, "apiVersion: kubectl-ome.ome.io/v1alpha1\n")
		require.Contains(t, y.out, "\nkind: StatusReport\n")
	})

	t.Run("validate with team-alpha raised to 20 prints the webhook's denial", func(t *testing.T) {
		data, err := os.ReadFile(guideTree)
		require.NoError(t, err)
		raised := strings.Replace(string(data), `nominal: "16"`, `nominal: "20"`, 1)
		require.NotEqual(t, string(data), raised)
		file := writeFile(t, "raised.yaml", raised)
		const msg = "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"
		r := ome("quota", "validate", "-f", file)
		require.Equal(t, 2, r.code, r.out+r.errOut)
		require.Contains(t, r.out, "denied team-alpha ("+file+":14): "+msg+"\n")
		// The webhook denies the same write with the same message.
		_, err = cluster.Kubectl(ctx, "apply", "--dry-run=server", "-f", file)
		require.Error(t, err)
		require.Contains(t, err.Error(), `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request: `+msg)
	})

	t.Run("validate of the guide's tree exits 0", func(t *testing.T) {
		r := ome("quota", "validate", "-f", guideTree)
		require.Equal(t, 0, r.code, r.out+r.errOut)
		require.Equal(t, "the tree keeps every rule\n", r.out)
	})

	t.Run("validate --delete", func(t *testing.T) {
		r := ome("quota", "validate", "--delete", "ml-research")
		require.Equal(t, 2, r.code, r.out+r.errOut)
		require.Contains(t, r.out, "denied ml-research: ml-research still has children (team-alpha, team-beta)")
		r = ome("quota", "validate", "--delete", "team-beta")
		require.Equal(t, 0, r.code, r.out+r.errOut)
		r = ome("quota", "validate", "--delete", "nobody")
		require.Equal(t, 1, r.code)
		require.Equal(t, "Error from server (NotFound): acceleratorquotas.ome.io \"nobody\" not found\n", r.errOut)
	})

	t.Run("validate --offline needs no kubeconfig", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
		t.Setenv("HOME", t.TempDir())
		r := omeWith("quota", "validate", "--offline", "-f", guideTree)
		require.Equal(t, 0, r.code, r.out+r.errOut)
		// Online, the same command has no cluster to read.
		r = omeWith("quota", "validate", "-f", guideTree)
		require.Equal(t, 1, r.code, r.out)
		require.NotEmpty(t, r.errOut)
	})

	t.Run("validate refuses files that are not AcceleratorQuotas", func(t *testing.T) {
		cm := writeFile(t, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
		r := ome("quota", "validate", "-f", cm)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.errOut, "error: "+cm+":1: kind \"ConfigMap\" of apiVersion \"v1\" is not an AcceleratorQuota")
		bad := writeFile(t, "bad.yaml", "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: x\n---\nspec: [\n")
		r = ome("quota", "validate", "-f", bad)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.errOut, "error: "+bad+":6: the document does not parse")
	})

	t.Run("validate --without-nodes two A100 nodes freezes ml-research and its teams", func(t *testing.T) {
		r := ome("quota", "validate", "--without-nodes", "gpu-node-1,gpu-node-2")
		require.Equal(t, 2, r.code, r.out+r.errOut)
		require.Contains(t, r.out, "high-water mark nvidia.com/gpu@a100 falls from 32 to 16\n")
		require.Contains(t, r.out, "ml-research would be CapacityExceeded: budget nvidia.com/gpu on a100 is 24 but the high-water mark on root is 16")
		require.Contains(t, r.out, "team-alpha would be Frozen: ancestor ml-research is CapacityExceeded")
		require.Contains(t, r.out, "team-beta would be Frozen: ancestor ml-research is CapacityExceeded")
		check(t, "without-two-nodes.txt", r.out)
	})

	t.Run("validate --without-nodes one A100 node lowers the mark to 24 with nothing over", func(t *testing.T) {
		r := ome("quota", "validate", "--without-nodes", "gpu-node-4")
		require.Equal(t, 0, r.code, r.out+r.errOut)
		require.Contains(t, r.out, "high-water mark nvidia.com/gpu@a100 falls from 32 to 24\n")
		require.Contains(t, r.out, "no node would become CapacityExceeded or frozen\n")
		r = ome("quota", "validate", "--without-nodes", "gpu-node-9")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.errOut, `error: nodes "gpu-node-9" not found`)
	})

	t.Run("bad node names", func(t *testing.T) {
		for _, cmd := range [][]string{{"quota", "tree", "nobody"}, {"quota", "status", "nobody"}} {
			r := ome(cmd...)
			require.Equal(t, 1, r.code)
			require.Equal(t, "Error from server (NotFound): acceleratorquotas.ome.io \"nobody\" not found\n", r.errOut)
		}
	})

	t.Run("a node deletion freezes big-team and tree and status name the cause", func(t *testing.T) {
		labels := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB"}
		_, err := cluster.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{
			ObjectMeta: metav1.ObjectMeta{Name: "h100"}, Spec: kueuev1beta2.ResourceFlavorSpec{NodeLabels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
		for i := 1; i <= 4; i++ {
			n := localcluster.GPUNode(fmt.Sprintf("big-node-%d", i), 8)
			n.Labels = labels
			_, err := localcluster.ApplyNode(ctx, cluster.Kube, n)
			require.NoError(t, err)
		}
		markIs(t, "google.com/tpu=0\nnvidia.com/gpu=32")
		tree := writeFile(t, "big.yaml", `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: big
spec:
  role: Cohort
  parentRef: {name: root}
  budgets:
    - {resourceName: nvidia.com/gpu, resourceFlavor: h100, nominal: "28"}
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: big-team
spec:
  role: ClusterQueue
  parentRef: {name: big}
  budgets:
    - {resourceName: nvidia.com/gpu, resourceFlavor: h100, nominal: "20"}
`)
		_, err = cluster.Kubectl(ctx, "apply", "-f", tree)
		require.NoError(t, err)
		testutil.KubectlEquals(t, cluster, 30*time.Second, "True True", "get", "aq", "big-team", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Materialized")].status}`)
		require.NoError(t, cluster.Kube.CoreV1().Nodes().Delete(ctx, "big-node-4", metav1.DeleteOptions{}))
		testutil.KubectlEquals(t, cluster, 30*time.Second, "Frozen", "get", "aq", "big-team", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].reason}`)
		markIs(t, "google.com/tpu=0\nnvidia.com/gpu=24")

		r := ome("quota", "tree", "big")
		require.Equal(t, 0, r.code, r.errOut)
		check(t, "tree-frozen.txt", r.out)
		require.Contains(t, r.out, "big  Cohort  NotReady (CapacityExceeded)")
		require.Contains(t, r.out, "big-team  ClusterQueue  NotReady (Frozen by big, CapacityExceeded)")
		j := ome("quota", "tree", "big", "-o", "json")
		require.Contains(t, j.out, `"frozenBy": "big"`)

		s := ome("quota", "status", "big-team")
		require.Equal(t, 0, s.code, s.errOut)
		check(t, "status-frozen.txt", s.out)
		require.Contains(t, s.out, "Caused by:\n  big-team Frozen: ancestor big is CapacityExceeded")
		require.Contains(t, s.out, "    big CapacityExceeded: budget nvidia.com/gpu on h100 is 28 but the high-water mark on root is 24")
		require.Contains(t, s.out, "ClusterQueue big-team: Held")

		// A label selector names Nodes too. The named Nodes go one after
		// another, as the manager sees deletions: the mark falls with the
		// first two (16, then 8), and the last H100 node's departure leaves
		// the pair unmeasured, so the mark stays at 8, as the guide says.
		v := ome("quota", "validate", "--without-nodes", "nvidia.com/gpu.product=NVIDIA-H100-80GB")
		require.Equal(t, 2, v.code, v.out+v.errOut)
		require.Contains(t, v.out, "Without big-node-1, big-node-2, big-node-3:\n")
		require.Contains(t, v.out, "high-water mark nvidia.com/gpu@h100 falls from 24 to 8\n")
		require.Contains(t, v.out, "big would be CapacityExceeded: budget nvidia.com/gpu on h100 is 28 but the high-water mark on root is 8")
	})
}
