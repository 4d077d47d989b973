package impact

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

var (
	cluster *localcluster.Cluster
	manager *localcluster.Manager
	// auditLog is the API server's audit log of every request but reads:
	// what shows that the plugin wrote nothing.
	auditLog string
)

// auditPolicy logs every request but get, list and watch.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
`

// stopAfter runs the tests, then stops the package's manager before the
// control plane goes.
type stopAfter struct{ m *testing.M }

func (s stopAfter) Run() int {
	code := s.m.Run()
	if manager != nil {
		manager.Stop()
		if code != 0 {
			fmt.Fprintf(os.Stderr, "--- manager log (last lines) ---\n%s\n", manager.Tail(60))
		}
	}
	return code
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ome-impact-")
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
	opts := localcluster.Options{Kueue: true, Namespaces: []string{"ome", ns},
		APIServerArgs: map[string]string{"audit-policy-file": policy, "audit-log-path": auditLog}}
	return localcluster.RunTests(stopAfter{m}, opts, true, func(ctx context.Context, c *localcluster.Cluster) error {
		cluster = c
		port, err := localcluster.FreePort()
		if err != nil {
			return err
		}
		if err := c.InstallWebhook(ctx, port); err != nil {
			return err
		}
		// One manager for the package, its webhook on: Kueue objects in
		// ml-serving, and no periodic refresh of root's stamps, so that
		// nothing writes while a plan runs but what the test does.
		args := append([]string{"--enrolled-namespaces=" + ns, "--capacity-report-interval=0s", "-v=1"}, localcluster.WebhookFlags(port)...)
		if manager, err = c.StartManager(ctx, c.ManagerBin, "m1", dir, args...); err != nil {
			return err
		}
		// The manager creates root: the tests' trees hang from it. Its
		// status, written from the manager's state, proves that the
		// state (which the webhook judges against) holds it too; until
		// then a child of root is refused as having no parent.
		if err := testutil.Poll(time.Minute, 200*time.Millisecond, func() error {
			root, err := c.AQs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if root.Status.ObservedGeneration != root.Generation {
				return fmt.Errorf("root's status has observed generation %d of %d", root.Status.ObservedGeneration, root.Generation)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("the manager did not create and observe root: %w", err)
		}
		return nil
	})
}
