// Package testutil holds the small helpers that the control-plane test
// packages share: polling for an outcome, and running and comparing kubectl
// output, and the guide's ResourceFlavor.
package testutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// A100Flavor makes sure the guide's ResourceFlavor a100 exists for the
// test, and deletes it at the end when the test created it, so that tests
// that create it themselves find the cluster as they expect.
func A100Flavor(t testing.TB, c *localcluster.Cluster) {
	t.Helper()
	flavors := c.Kueue.KueueV1beta2().ResourceFlavors()
	_, err := flavors.Create(context.Background(), localcluster.A100Flavor(), metav1.CreateOptions{})
	switch {
	case err == nil:
		t.Cleanup(func() { _ = flavors.Delete(context.Background(), "a100", metav1.DeleteOptions{}) })
	case !apierrors.IsAlreadyExists(err):
		t.Fatalf("creating ResourceFlavor a100: %v", err)
	}
}
