package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	aqs     aqtyped.AcceleratorQuotaInterface
	// auditLog is the API server's audit log: every request but reads.
	auditLog string
	// omeCRD is set when OME_E2E_CRD=ome: the package runs on OME's own
	// AcceleratorQuota CRD (aqtest.OMECRD) in place of the project's, as
	// the guide's cluster does, where OME's ome-crd chart installs it.
	omeCRD = os.Getenv("OME_E2E_CRD") == "ome"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ome-e2e-audit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	policy := filepath.Join(dir, "policy.yaml")
	auditLog = filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := localcluster.Options{Kueue: true, APIServerArgs: map[string]string{"audit-policy-file": policy, "audit-log-path": auditLog}}
	if omeCRD {
		ours, err := os.ReadFile("../../config/crd/ome.io_acceleratorquotas.yaml")
		if err == nil {
			opts.AQCRD, err = aqtest.OMECRD(ours)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	opts.Namespaces = []string{"ome", "ml-serving"}
	return localcluster.RunTests(m, opts, true, func(_ context.Context, c *localcluster.Cluster) error {
		cluster, aqs = c, c.AQs
		return nil
	})
}
