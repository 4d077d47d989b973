package quotactl

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

type result struct {
	code        int
	out, errOut string
}

// runWith runs the plugin in process; stdin feeds -f -.
func runWith(stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	code := Run(args, genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	return result{code, out.String(), errOut.String()}
}

// noCluster points the kubeconfig nowhere, so that a command that reached
// for a cluster would fail.
func noCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

const guideTree = "../config/samples/quota-tree.yaml"

func TestHelpHasExamples(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"quota", "--help"}, {"quota", "tree", "--help"},
		{"quota", "status", "--help"}, {"quota", "validate", "--help"}, {"quota", "plan", "--help"}, {"quota", "release", "--help"},
	} {
		r := runWith("", args...)
		require.Equal(t, 0, r.code, args)
		require.Contains(t, r.out, "Examples:\n  ", args)
		require.Contains(t, r.out, "kubectl ome quota", args)
	}
	r := runWith("", "quota", "--help")
	for _, flag := range []string{"--kubeconfig", "--context", "--as", "--namespace"} {
		require.Contains(t, r.out, flag)
	}
}

func TestUsageErrorsAreKubectlStyle(t *testing.T) {
	noCluster(t)
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag": {[]string{"quota", "tree", "--bogus"},
			"error: unknown flag: --bogus\nSee 'kubectl ome quota tree --help' for usage.\n"},
		"two nodes": {[]string{"quota", "tree", "a", "b"},
			"error: tree takes at most one NODE, got 2: a b\nSee 'kubectl ome quota tree --help' for usage.\n"},
		"status without a node": {[]string{"quota", "status"},
			"error: status needs exactly one NODE, got 0\nSee 'kubectl ome quota status --help' for usage.\n"},
		"bad output": {[]string{"quota", "tree", "-o", "wide"},
			"error: unable to match a printer suitable for the output format \"wide\", allowed formats are: json,yaml\nSee 'kubectl ome quota tree --help' for usage.\n"},
		"offline without files": {[]string{"quota", "validate", "--offline"},
			"error: --offline judges files: pass them with -f\nSee 'kubectl ome quota validate --help' for usage.\n"},
		"offline with without-nodes": {[]string{"quota", "validate", "--offline", "-f", guideTree, "--without-nodes", "n1"},
			"error: --without-nodes needs the cluster's Nodes: drop --offline\nSee 'kubectl ome quota validate --help' for usage.\n"},
		"bad capacity": {[]string{"quota", "validate", "--offline", "-f", guideTree, "--capacity", "nvidia.com/gpu=3"},
			"error: --capacity \"nvidia.com/gpu=3\": write it as resource@flavor=N, e.g. nvidia.com/gpu@a100=32\nSee 'kubectl ome quota validate --help' for usage.\n"},
		"missing file": {[]string{"quota", "validate", "--offline", "-f", "nope.yaml"},
			"error: the path \"nope.yaml\" does not exist\n"},
		"release without an origin": {[]string{"quota", "release"},
			"error: release needs --origin: the plane whose copies to delete (the value of their ome.io/quota-origin label)\nSee 'kubectl ome quota release --help' for usage.\n"},
		"release of a bad origin": {[]string{"quota", "release", "--origin", "a b"},
			"error: --origin=\"a b\" is not a label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')\nSee 'kubectl ome quota release --help' for usage.\n"},
		"unknown command": {[]string{"quota", "trees"}, "error: unknown command \"trees\" for \"kubectl ome quota\"\n"},
		"plan with an argument": {[]string{"quota", "plan", "quota-tree.yaml"},
			"error: plan takes no arguments, got [\"quota-tree.yaml\"]: pass files with -f\nSee 'kubectl ome quota plan --help' for usage.\n"},
		"plan with a claim of nothing": {[]string{"quota", "plan", "--claim-size", "0"},
			"error: --claim-size \"0\" is not an amount above 0: write one such as 1 or 4\nSee 'kubectl ome quota plan --help' for usage.\n"},
		"plan with a claim of words": {[]string{"quota", "plan", "--claim-size", "one"},
			"error: --claim-size \"one\" is not an amount above 0: write one such as 1 or 4\nSee 'kubectl ome quota plan --help' for usage.\n"},
		"plan as a table": {[]string{"quota", "plan", "-o", "wide"},
			"error: unable to match a printer suitable for the output format \"wide\", allowed formats are: json,yaml\nSee 'kubectl ome quota plan --help' for usage.\n"},
		"plan of a missing file": {[]string{"quota", "plan", "-f", "nope.yaml"},
			"error: the path \"nope.yaml\" does not exist\n"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := runWith("", c.args...)
			require.Equal(t, 1, r.code)
			require.Empty(t, r.out)
			require.Equal(t, c.want, r.errOut)
		})
	}
}

func TestValidateOffline(t *testing.T) {
	noCluster(t)
	guide, err := os.ReadFile(guideTree)
	require.NoError(t, err)
	raised := strings.Replace(string(guide), `nominal: "16"`, `nominal: "20"`, 1)
	cases := map[string]struct {
		args  []string
		stdin string
		code  int
		out   string
	}{
		"the guide's tree":            {args: []string{"-f", guideTree}, out: "the tree keeps every rule\n"},
		"the guide's tree from stdin": {args: []string{"-f", "-"}, stdin: string(guide), out: "the tree keeps every rule\n"},
		"within capacity":             {args: []string{"-f", guideTree, "--capacity", "nvidia.com/gpu@a100=32"}, out: "the tree keeps every rule\n"},
		"above capacity warns": {
			args: []string{"-f", guideTree, "--capacity", "nvidia.com/gpu@a100=16"},
			out: "warning ml-research (" + guideTree + ":1): budget nvidia.com/gpu on a100 is 24 but the high-water mark on root is 16: lower the budget, or add capacity\n" +
				"the tree keeps every rule\n",
		},
		"team-alpha raised to 20": {
			args: []string{"-f", "-"}, stdin: raised, code: 2,
			out: "denied team-beta (<stdin>:27): ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28\n" +
				"1 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
		"a team without its parent": {
			args: []string{"-f", "-"}, stdin: "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata: {name: t}\nspec:\n  role: ClusterQueue\n  parentRef: {name: nowhere}\n  budgets: [{resourceName: nvidia.com/gpu, resourceFlavor: a100, nominal: '1'}]\n",
			code: 2,
			out: "denied t (<stdin>:1): t: parent nowhere does not exist: create it, or point spec.parentRef at an existing node\n" +
				"1 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
		"too deep": {
			args: []string{"-f", "-", "--max-tree-depth", "1"}, stdin: string(guide), code: 2,
			out: "denied team-alpha (<stdin>:14): team-alpha: node is 2 levels below the root, exceeding the configured maximum of 1\n" +
				"denied team-beta (<stdin>:27): team-beta: node is 2 levels below the root, exceeding the configured maximum of 1\n" +
				"2 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
		"deleting a node with children": {
			args: []string{"-f", guideTree, "--delete", "ml-research"}, code: 2,
			out: "denied ml-research: ml-research still has children (team-alpha, team-beta): delete them, or point their spec.parentRef at another node, first\n" +
				"1 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := runWith(c.stdin, append([]string{"quota", "validate", "--offline"}, c.args...)...)
			require.Equal(t, c.code, r.code, r.out+r.errOut)
			require.Equal(t, c.out, r.out)
			require.Empty(t, r.errOut)
		})
	}
}

func TestValidateOfflineReport(t *testing.T) {
	noCluster(t)
	r := runWith("", "quota", "validate", "--offline", "-f", guideTree, "--capacity", "nvidia.com/gpu@a100=16", "-o", "yaml")
	require.Equal(t, 0, r.code, r.errOut)
	require.Equal(t, `apiVersion: kubectl-ome.ome.io/v1alpha1
kind: ValidationReport
marks:
- flavor: a100
  highWaterMark: "16"
  resource: nvidia.com/gpu
offline: true
warnings:
- message: 'budget nvidia.com/gpu on a100 is 24 but the high-water mark on root is
    16: lower the budget, or add capacity'
  node: ml-research
  reason: CapacityExceeded
  source: ../config/samples/quota-tree.yaml:1
`, r.out)
}

func TestFilesNameTheFileAndLine(t *testing.T) {
	noCluster(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata: {name: x}\nspec: {role: Cohort, parentRef: {name: root}}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("# a comment\n---\n\n---\napiVersion: v1\nkind: ConfigMap\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not read"), 0o644))
	cases := map[string]struct {
		path, want string
	}{
		"not an AcceleratorQuota, in a folder": {dir,
			"error: " + filepath.Join(dir, "b.yaml") + ":5: kind \"ConfigMap\" of apiVersion \"v1\" is not an AcceleratorQuota (apiVersion ome.io/v1beta1): validate checks AcceleratorQuotas only, remove the document or pass another file\n"},
		"does not parse": {writeFile(t, "bad.yaml", "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: x\nspec:\n  role: [\n"),
			"error: %s:6: the document does not parse: yaml: did not find expected node content\n"},
		"unknown field": {writeFile(t, "typo.yaml", "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: x\nspec:\n  role: Cohort\n  parent: {name: root}\n"),
			"error: %s:7: the AcceleratorQuota does not decode: unknown field \"parent\"\n"},
		"no name": {writeFile(t, "noname.yaml", "\n\napiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nspec: {role: Cohort}\n"),
			"error: %s:3: the AcceleratorQuota has no metadata.name: name it\n"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := runWith("", "quota", "validate", "--offline", "-f", c.path)
			require.Equal(t, 1, r.code, r.out)
			want := c.want
			if strings.Contains(want, "%s") {
				want = strings.Replace(want, "%s", c.path, 1)
			}
			require.Equal(t, want, r.errOut)
		})
	}
}

func TestSubset(t *testing.T) {
	type obj = map[string]any
	live := obj{"metadata": obj{"name": "a", "uid": "u"}, "spec": obj{"q": "1000m", "list": []any{"x", "y"}}}
	cases := map[string]struct {
		desired any
		path    string
		ok      bool
	}{
		"a subset":            {obj{"spec": obj{"q": "1"}}, "", true},
		"an equal quantity":   {obj{"spec": obj{"q": "1000m", "list": []any{"x", "y"}}}, "", true},
		"a different amount":  {obj{"spec": obj{"q": "2"}}, ".spec.q", false},
		"a longer list":       {obj{"spec": obj{"list": []any{"x", "y", "z"}}}, ".spec.list", false},
		"a missing field":     {obj{"spec": obj{"cohort": "c"}}, ".spec.cohort", false},
		"apiVersion is moot":  {obj{"apiVersion": "v1", "kind": "K", "metadata": obj{"name": "a"}}, "", true},
		"a different element": {obj{"spec": obj{"list": []any{"x", "z"}}}, ".spec.list[1]", false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path, ok := subset(c.desired, live)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.path, path)
		})
	}
}

func TestColour(t *testing.T) {
	o := &options{}
	var buf bytes.Buffer
	require.False(t, o.colorOn(&buf), "a buffer is no terminal")
	on := true
	o.color = &on
	require.Equal(t, "\x1b[32mReady\x1b[0m", palette(o.colorOn(&buf)).good("Ready"))
	require.Equal(t, "Ready", palette(false).good("Ready"))
	// NO_COLOR wins over a terminal; os.Stdout under go test is no terminal
	// either, so this checks only that NO_COLOR is read.
	t.Setenv("NO_COLOR", "")
	require.False(t, (&options{}).colorOn(os.Stdout))
}

func TestAge(t *testing.T) {
	for d, want := range map[string]string{"5s": "5s", "119s": "119s", "3m": "3m", "150m": "2h", "49h": "2d", "-1s": "0s"} {
		dur, err := timeParse(d)
		require.NoError(t, err)
		require.Equal(t, want, age(dur), d)
	}
}

// TestPluginDoesNotImportWebhook: the plugin shares the rule book through
// state, not through the admission server.
func TestPluginDoesNotImportWebhook(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "ome.io/quota-manager/cmd/kubectl-ome").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "ome.io/quota-manager/state")
	require.Contains(t, deps, "ome.io/quota-manager/api/client/clientset/versioned")
	for _, d := range deps {
		require.False(t, strings.HasPrefix(d, "ome.io/quota-manager/webhook"), "kubectl-ome imports %s", d)
	}
}

// TestOnlyWebhookHoldsCertificateCode: certificate code lives in webhook
// alone. The manager may configure TLS (crypto/tls) for its HTTPS /metrics,
// whose certificate comes from webhook.ServingTLS.
func TestOnlyWebhookHoldsCertificateCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "ome.io/quota-manager/...").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if strings.HasPrefix(pkg, "ome.io/quota-manager/webhook") || strings.HasPrefix(pkg, "ome.io/quota-manager/test/") {
			continue
		}
		for _, imp := range f[1:] {
			if imp == "crypto/tls" && pkg == "ome.io/quota-manager/manager" {
				continue
			}
			switch imp {
			case "crypto/x509", "crypto/tls", "k8s.io/client-go/util/cert", "k8s.io/client-go/util/keyutil", "k8s.io/api/admission/v1":
				t.Errorf("%s imports %s: certificate and admission code belongs in package webhook", pkg, imp)
			}
		}
	}
}

func timeParse(s string) (time.Duration, error) { return time.ParseDuration(s) }

// validate --offline --members judges a fleet tree's splits: an Explicit
// split naming a cluster that is not a member, a Proportional one with no
// capacity to split by, and a tree that keeps every rule.
func TestValidateOfflineFleet(t *testing.T) {
	noCluster(t)
	tree := func(shares string) string {
		return "apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata: {name: root}\nspec: {role: Cohort}\n---\n" +
			"apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata: {name: team-a}\nspec:\n  role: ClusterQueue\n  parentRef: {name: root}\n  budgets:\n" +
			"  - {resourceName: nvidia.com/gpu, resourceFlavor: a100, nominal: '8', perCluster: [" + shares + "]}\n---\n" +
			"apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata: {name: team-b}\nspec:\n  role: ClusterQueue\n  parentRef: {name: root}\n  budgets:\n" +
			"  - {resourceName: nvidia.com/gpu, resourceFlavor: a100, nominal: '4'}\n"
	}
	good := tree("{cluster: east, nominal: '5'}, {cluster: west, nominal: '3'}")
	cases := map[string]struct {
		stdin string
		args  []string
		code  int
		out   string
	}{
		"splits that hold": {stdin: good, args: []string{"--capacity", "nvidia.com/gpu@a100=64"}, out: "the tree keeps every rule\n"},
		"a share for a cluster that is not a member": {
			stdin: tree("{cluster: east, nominal: '5'}, {cluster: north, nominal: '3'}"), args: []string{"--capacity", "nvidia.com/gpu@a100=64"}, code: 2,
			out: "denied team-a (<stdin>:6): team-a: budget nvidia.com/gpu on a100: perCluster names north, which is not a member cluster of the fleet (2 members): name a member, or add north to the plane's inventory (a ClusterProfile it selects, or an entry of projection.clusters)\n" +
				"1 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
		"shares above the budget": {
			stdin: tree("{cluster: east, nominal: '5'}, {cluster: west, nominal: '4'}"), args: []string{"--capacity", "nvidia.com/gpu@a100=64"}, code: 2,
			out: "denied team-a (<stdin>:6): team-a: budget nvidia.com/gpu on a100: the shares in perCluster add up to 9, more than the budget of 8: lower them, or raise the budget\n" +
				"1 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
		"nothing to split by": {
			stdin: good, code: 2,
			out: "denied team-b (<stdin>:15): team-b: budget nvidia.com/gpu on a100: every member cluster's high-water mark is 0, so there is nothing to split the budget 4 by: add capacity to a member, or split it explicitly (perCluster)\n" +
				"1 violation(s): the webhook would deny these writes, or the tree breaks a rule\n",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := runWith(c.stdin, append([]string{"quota", "validate", "--offline", "-f", "-", "--members", "west,east"}, c.args...)...)
			require.Equal(t, c.code, r.code, r.out+r.errOut)
			require.Equal(t, c.out, r.out)
			require.Empty(t, r.errOut)
		})
	}
	// The same shares in workload mode split nothing and break no rule.
	r := runWith(tree("{cluster: north, nominal: '9'}"), "quota", "validate", "--offline", "-f", "-", "--capacity", "nvidia.com/gpu@a100=64")
	require.Equal(t, 0, r.code, r.out+r.errOut)
	r = runWith("", "quota", "validate", "--members", "east")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.errOut, "--members is for --offline")
}
