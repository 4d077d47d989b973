package v1beta1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCRDsAreGenerated: the CRDs in config/crd and the chart are what
// `make generate` makes of this package's markers today, so a marker
// edited without regenerating (or a generated file edited by hand) fails
// here rather than on an API server.
func TestCRDsAreGenerated(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, args := range [][]string{
		{"tool", "controller-gen", "crd:crdVersions=v1", "paths=./api/v1beta1/", "output:crd:dir=" + out},
		{"run", "./hack/boundquantities", filepath.Join(out, "ome.io_acceleratorquotas.yaml")},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, b)
		}
	}
	for _, name := range []string{"ome.io_acceleratorquotas.yaml", "ome.io_admissionledgers.yaml"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{"config/crd", "charts/ome-quota-manager/files"} {
			got, err := os.ReadFile(filepath.Join(root, dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s is not what make generate makes of api/v1beta1: run make generate", dir, name)
			}
		}
	}
}
