// Package testutil holds the small helpers that the control-plane test
// packages share: polling for an outcome, running and comparing kubectl
// output, the guide's nodes and ResourceFlavor, managers and ClusterRoles
// for one test.
package testutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/test/localcluster"
)

// Eventually polls f until it returns "" (success) or the timeout passes,
// then fails the test with f's last complaint.
func Eventually(t testing.TB, timeout time.Duration, f func() string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = f(); last == "" {
			return
		}
	}
	t.Fatalf("after %s: %s", timeout, last)
}

// Poll is Eventually for code that has no test to fail (a TestMain, a
// helper that returns an error): it calls f every interval until f
// returns nil, and returns f's last error once timeout has passed.
func Poll(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// Normalize trims a kubectl table and collapses runs of spaces, as column
// widths vary with the content.
func Normalize(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

// Kubectl runs a kubectl command against the cluster: its output, or the
// failed test.
func Kubectl(t testing.TB, c *localcluster.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RunKubectl runs a kubectl command against the cluster with stdin (""
// for none) and returns both outputs and its error: a failure is the
// caller's to judge.
func RunKubectl(t testing.TB, c *localcluster.Cluster, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return c.KubectlInput(context.Background(), stdin, args...)
}

// MustKubectl runs a kubectl command with stdin and returns its output,
// or fails the test with what it printed.
func MustKubectl(t testing.TB, c *localcluster.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := RunKubectl(t, c, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s failed: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// WaitMaterialized waits until each named node reports Materialized True.
func WaitMaterialized(t testing.TB, c *localcluster.Cluster, names ...string) {
	t.Helper()
	Eventually(t, 30*time.Second, func() string {
		for _, n := range names {
			aq, err := c.AQs.Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if m := meta.FindStatusCondition(aq.Status.Conditions, "Materialized"); m == nil || m.Status != metav1.ConditionTrue {
				return fmt.Sprintf("%s: Materialized %+v; Ready %+v", n, m, meta.FindStatusCondition(aq.Status.Conditions, "Ready"))
			}
		}
		return ""
	})
}

// KubectlEquals waits until a kubectl command prints exactly want, up to
// runs of spaces.
func KubectlEquals(t testing.TB, c *localcluster.Cluster, timeout time.Duration, want string, args ...string) {
	t.Helper()
	Eventually(t, timeout, func() string {
		out, err := c.Kubectl(context.Background(), args...)
		if err != nil {
			return err.Error()
		}
		if Normalize(out) != Normalize(want) {
			return fmt.Sprintf("kubectl %s printed\n%s\nwant\n%s", strings.Join(args, " "), out, want)
		}
		return ""
	})
}

// GuideCluster applies the guide's four A100 nodes of 8 GPUs, gpu-node-1 to
// gpu-node-4, and creates its ResourceFlavor a100, which must not exist
// yet.
func GuideCluster(t testing.TB, c *localcluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	if err := localcluster.ApplyGuideNodes(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceFlavor a100: %v", err)
	}
}

// A100Flavor makes sure the guide's ResourceFlavor a100 exists for the
// test, and deletes it at the end when the test created it, so that tests
// that create it themselves find the cluster as they expect. The deletion
// is waited for: Kueue holds a flavor by a finalizer until no ClusterQueue
// uses it, and a flavor still being deleted refuses a create.
func A100Flavor(t testing.TB, c *localcluster.Cluster) {
	t.Helper()
	flavors := c.Kueue.KueueV1beta2().ResourceFlavors()
	_, err := flavors.Create(context.Background(), localcluster.A100Flavor(), metav1.CreateOptions{})
	switch {
	case err == nil:
		t.Cleanup(func() {
			ctx := context.Background()
			if err := flavors.Delete(ctx, "a100", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting ResourceFlavor a100: %v", err)
				return
			}
			Eventually(t, 60*time.Second, func() string {
				if _, err := flavors.Get(ctx, "a100", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Sprintf("ResourceFlavor a100 is still there after its deletion (Kueue's finalizer?): %v", err)
				}
				return ""
			})
		})
	case !apierrors.IsAlreadyExists(err):
		t.Fatalf("creating ResourceFlavor a100: %v", err)
	}
}

// BindClusterRole binds the ClusterRole name to ServiceAccount ns/sa, in a
// ClusterRoleBinding of the same name.
func BindClusterRole(t testing.TB, c *localcluster.Cluster, name, ns, sa string) {
	t.Helper()
	_, err := c.Kube.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding ClusterRole %s to %s/%s: %v", name, ns, sa, err)
	}
}

// GrantClusterRole creates the ClusterRole name with rules, binds it to
// ServiceAccount ns/sa (BindClusterRole), and deletes both at the end of
// the test.
func GrantClusterRole(t testing.TB, c *localcluster.Cluster, name, ns, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", name, err)
	}
	BindClusterRole(t, c, name, ns, sa)
	t.Cleanup(func() {
		_ = c.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = c.Kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// InstallWebhook registers the quota manager's validating webhook with the
// API server, to be served on a free port, and returns the flags that make
// a manager serve it there.
func InstallWebhook(t testing.TB, c *localcluster.Cluster) []string {
	t.Helper()
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallWebhook(context.Background(), port); err != nil {
		t.Fatal(err)
	}
	return localcluster.WebhookFlags(port)
}

// StartManager starts the quota manager bin as name with args and waits
// until it is ready (RunManager); it fails the test when it cannot.
func StartManager(t testing.TB, c *localcluster.Cluster, bin, name string, args ...string) *localcluster.Manager {
	t.Helper()
	m, err := RunManager(t, c, bin, name, Ready, args...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// LaunchManager is StartManager without the wait for readiness, for a
// test of a manager that must not become ready.
func LaunchManager(t testing.TB, c *localcluster.Cluster, bin, name string, args ...string) *localcluster.Manager {
	t.Helper()
	m, err := RunManager(t, c, bin, name, ManagerOptions{}, args...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ManagerOptions say how RunManager starts a manager.
type ManagerOptions struct {
	// Env is added to the process's environment.
	Env []string
	// Ready: wait until its /readyz answers (Cluster.StartManager).
	Ready bool
}

// Ready is RunManager's common case: wait for readiness, nothing added to
// the environment.
var Ready = ManagerOptions{Ready: true}

// RunManager is the test kit's one manager launcher: it starts the quota
// manager bin as name with args and o, its log in a folder of the test;
// at the end of the test it stops it and, when the test failed, shows the
// last lines of its log. It returns an error rather than failing the
// test, so that a goroutine may call it.
func RunManager(t testing.TB, c *localcluster.Cluster, bin, name string, o ManagerOptions, args ...string) (*localcluster.Manager, error) {
	ctx := context.Background()
	var m *localcluster.Manager
	var err error
	if o.Ready {
		m, err = c.StartManagerEnv(ctx, bin, name, t.TempDir(), o.Env, args...)
	} else {
		m, err = c.LaunchManagerEnv(ctx, bin, name, t.TempDir(), o.Env, args...)
	}
	if err != nil {
		return nil, err
	}
	stopAtCleanup(t, m)
	return m, nil
}

// stopAtCleanup stops m when the test ends, and logs the end of its log
// when the test failed.
func stopAtCleanup(t testing.TB, m *localcluster.Manager) {
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			t.Logf("--- %s log (last lines) ---\n%s", m.Name, m.Tail(40))
		}
	})
}
