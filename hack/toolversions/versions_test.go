package toolversions

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// toolTags are the build tags hack/tools.sh builds tools/kube with.
const toolTags = "remove_all_sd"

// compiled returns, for each module whose packages `go list -deps` run in
// dir over args names, the version that is compiled (the replacement's,
// where go.mod replaces it).
func compiled(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	f := `{{if not .Standard}}{{with .Module}}{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}`
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", f}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderrOf(err))
	}
	mods := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, version, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			mods[path] = version
		}
	}
	return mods
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// tools returns the packages of tools/kube's tool directive.
func tools(t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v\n%s", dir, err, stderrOf(err))
	}
	var mod struct{ Tool []struct{ Path string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, tl := range mod.Tool {
		pkgs = append(pkgs, tl.Path)
	}
	if len(pkgs) == 0 {
		t.Fatalf("%s/go.mod names no tool", dir)
	}
	return pkgs
}

func TestToolVersionsMatch(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	kube := filepath.Join(root, "tools", "kube")
	toolMods := compiled(t, kube, append([]string{"-tags", toolTags}, tools(t, kube)...)...)
	projMods := compiled(t, root, "-test", "./...")
	var shared, wrong []string
	for path, v := range projMods {
		tv, ok := toolMods[path]
		if !ok || strings.HasPrefix(path, "ome.io/") {
			continue
		}
		shared = append(shared, path)
		if tv != v {
			wrong = append(wrong, path+": tools/kube compiles "+tv+", the project "+v)
		}
	}
	sort.Strings(wrong)
	for _, w := range wrong {
		t.Error(w)
	}
	if len(wrong) > 0 {
		t.Log("each shared package is then compiled twice on a cold machine: " +
			"`go get MODULE@VERSION` (the newer one) in the module that is behind, then `go mod tidy`")
	}
	// The project compiles Kubernetes, Kueue and helm packages that the
	// tools also compile; a much smaller overlap means that this test
	// looked at the wrong packages.
	for _, m := range []string{"k8s.io/client-go", "k8s.io/apiserver", "sigs.k8s.io/kueue", "helm.sh/helm/v4"} {
		if _, ok := toolMods[m]; !ok {
			t.Errorf("tools/kube compiles no package of %s", m)
		}
		if _, ok := projMods[m]; !ok {
			t.Errorf("the project compiles no package of %s", m)
		}
	}
	t.Logf("%d modules compiled by both, at one version each", len(shared)-len(wrong))
}
