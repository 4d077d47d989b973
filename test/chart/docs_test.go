package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/test/localcluster"
)

// fleetBlock is one runnable block of docs/install.md's "Connecting a
// plane and its members": a sh block whose first line is
// "# fleet-STEP: WAY".
type fleetBlock struct {
	step, way, text string
	perMember       bool
	// files are the files the block writes with cat > FILE <<'EOF'.
	files map[string]string
}

var (
	shBlock   = regexp.MustCompile("(?ms)^```sh\n(.*?)^```")
	fleetMark = regexp.MustCompile(`^# fleet-([a-z]+): ([a-z]+)\n`)
	heredoc   = regexp.MustCompile(`(?ms)^cat > (\S+) <<'EOF'\n(.*?)^EOF$`)
)

// FleetBlocks returns the runnable blocks of docs/install.md, in order.
func fleetBlocks(t *testing.T) []fleetBlock {
	t.Helper()
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	var out []fleetBlock
	for _, m := range shBlock.FindAllStringSubmatch(string(doc), -1) {
		mark := fleetMark.FindStringSubmatch(m[1])
		if mark == nil {
			continue
		}
		b := fleetBlock{step: mark[1], way: mark[2], text: m[1], files: map[string]string{}}
		b.perMember = strings.HasPrefix(m[1][len(mark[0]):], "CLUSTER=east\n")
		for _, h := range heredoc.FindAllStringSubmatch(m[1], -1) {
			b.files[h[1]] = h[2]
		}
		out = append(out, b)
	}
	return out
}

// TestInstallDocFleetBlocks: the walk-through's blocks follow the
// convention a test runs them by (their order, ways, per-member blocks,
// a context named on every kubectl and helm command), and the values
// files they write render as they say: members in workload mode with
// remoteAccess, a plane that picks the profiles the blocks label, and one
// that lists the Secrets the blocks create, then drops west.
func TestInstallDocFleetBlocks(t *testing.T) {
	blocks := fleetBlocks(t)
	var got []string
	for _, b := range blocks {
		name := b.step + ": " + b.way
		if b.perMember {
			name += " (per member)"
		}
		got = append(got, name)
		require.Contains(t, []string{"both", "clusterprofiles", "secrets"}, b.way, name)
		for _, line := range strings.Split(b.text, "\n") {
			for _, cmd := range []string{"kubectl ", "helm "} {
				if !strings.Contains(line, cmd) || strings.HasPrefix(strings.TrimSpace(line), "#") {
					continue
				}
				require.Regexp(t, `--context|--kube-context|--kubeconfig=`, line, "%s: every command names its cluster", name)
			}
		}
	}
	require.Equal(t, []string{
		"setup: both",
		"member: both (per member)",
		"setup: clusterprofiles",
		"member: clusterprofiles (per member)",
		"plane: clusterprofiles",
		"member: secrets (per member)",
		"plane: secrets",
		"check: both",
		"rotate: clusterprofiles (per member)",
		"rotate: secrets (per member)",
		"revoke: both (per member)",
		"remove: clusterprofiles",
		"remove: secrets",
		"release: both (per member)",
	}, got)

	values := func(t *testing.T, b fleetBlock, file string) *Rendered {
		t.Helper()
		data, ok := b.files[file]
		require.True(t, ok, "the %s: %s block writes %s", b.step, b.way, file)
		path := filepath.Join(t.TempDir(), file)
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
		lint, err := Lint([]string{path})
		require.NoError(t, err)
		require.Empty(t, lint, "helm lint --strict of %s", file)
		return render(t, []string{path})
	}
	block := func(step, way string) fleetBlock {
		for _, b := range blocks {
			if b.step == step && b.way == way {
				return b
			}
		}
		t.Fatalf("no %s: %s block", step, way)
		return fleetBlock{}
	}

	member := values(t, block("member", "both"), "member-values.yaml")
	require.NotNil(t, member.Get("ServiceAccount", "ome-quota-manager-remote-access"))
	o, _ := flags(t, deployment(t, member).Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, manager.ModeWorkload, o.Mode)
	require.Contains(t, block("member", "both").text, "create secret generic ome-quota-manager-remote-access-binding")

	profiles := values(t, block("plane", "clusterprofiles"), "plane-values.yaml")
	o, _ = flags(t, deployment(t, profiles).Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, manager.MembersFromClusterProfiles, o.MembersFrom)
	require.Equal(t, "fleet=gpu", o.ClusterProfileSelector)
	require.Equal(t, "ome", o.ClusterProfileNamespace)
	profile := block("member", "clusterprofiles").text
	require.Contains(t, profile, "  namespace: ome\n  labels:\n    fleet: gpu\n", "the profile is in the namespace the plane watches, with the label it selects")
	require.Contains(t, profile, "    - name: secretreader\n", "the access provider is the one the default providers file names")
	require.Contains(t, profile, "              clusterName: $CLUSTER\n")
	require.Contains(t, profile, `create secret generic "$CLUSTER"`, "the secretreader plugin reads the Secret named after the cluster")

	secrets := values(t, block("plane", "secrets"), "plane-values.yaml")
	cm := convert[corev1.ConfigMap](t, secrets.Get("ConfigMap", "ome-quota-manager-members"))
	require.Equal(t, map[string]string{"east": "east-kubeconfig", "west": "west-kubeconfig"}, cm.Data)
	require.Contains(t, block("member", "secrets").text, `create secret generic "$CLUSTER-kubeconfig" --dry-run=client -o yaml --from-file=kubeconfig=`)
	removed := values(t, block("remove", "secrets"), "plane-values.yaml")
	require.Equal(t, map[string]string{"east": "east-kubeconfig"}, convert[corev1.ConfigMap](t, removed.Get("ConfigMap", "ome-quota-manager-members")).Data)
	require.Equal(t, deployment(t, secrets).Spec.Template, deployment(t, removed).Spec.Template, "dropping west restarts nothing")
}
