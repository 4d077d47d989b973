package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ome.io/quota-manager/test/localcluster"
)

// runDemo starts the quota manager and walks the guide's Steps 1 and 2,
// printing each command and what it shows.
func runDemo(ctx context.Context, c *localcluster.Cluster) (*localcluster.Manager, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := c.EnsureNamespace(ctx, "ml-serving"); err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "building and starting ome-quota-manager...")
	bin, err := localcluster.BuildManager(ctx, c.Dir)
	if err != nil {
		return nil, err
	}
	port, err := localcluster.FreePort()
	if err != nil {
		return nil, err
	}
	if err := c.InstallWebhook(ctx, port); err != nil {
		return nil, err
	}
	m, err := c.StartManager(ctx, bin, "ome-quota-manager", c.Dir, append(localcluster.WebhookFlags(port), "--enrolled-namespaces=ml-serving")...)
	if err != nil {
		return nil, err
	}
	fmt.Printf("ome-quota-manager is running (log: %s, metrics: http://127.0.0.1:%d/metrics)\n", m.Log, m.MetricsPort)

	show := func(args ...string) (string, error) {
		fmt.Printf("\n$ kubectl %s\n", strings.Join(args, " "))
		out, err := c.Kubectl(ctx, args...)
		fmt.Print(out)
		return out, err
	}
	capacity := `jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.allocatable}{" "}{.highWaterMark}{"\n"}{end}`
	// Write the tree once root lists the flavor, as the guide says.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, _ := c.Kubectl(ctx, "get", "aq", "root", "-o", capacity)
		if strings.Contains(out, "nvidia.com/gpu a100") {
			break
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("root lists no capacity after a minute; see %s", m.Log)
		}
	}
	if _, err := show("get", "aq", "root", "-o", capacity); err != nil {
		return m, err
	}
	if _, err := show("apply", "-f", filepath.Join(root, "config", "samples", "quota-tree.yaml")); err != nil {
		return m, err
	}
	tree := `custom-columns=NAME:.metadata.name,ROLE:.spec.role,PARENT:.spec.parentRef.name,READY:.status.conditions[?(@.type=="Ready")].status,MATERIALIZED:.status.conditions[?(@.type=="Materialized")].status`
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		out, _ := c.Kubectl(ctx, "get", "aq", "-o", tree)
		if strings.Count(out, "True") == 8 {
			break
		}
	}
	for _, args := range [][]string{
		{"get", "aq", "-o", tree},
		{"get", "clusterqueues.kueue.x-k8s.io", "-l", "ome.io/quota-managed-by=ome-quota-manager", "-o", "custom-columns=NAME:.metadata.name,COHORT:.spec.cohortName"},
		{"get", "localqueues.kueue.x-k8s.io", "-n", "ml-serving", "-l", "ome.io/quota-managed-by=ome-quota-manager", "-o", "custom-columns=NAME:.metadata.name,CLUSTERQUEUE:.spec.clusterQueue"},
		{"get", "aq"},
	} {
		if _, err := show(args...); err != nil {
			return m, err
		}
	}
	// The guide's "Change the tree": raising team-alpha to 20 is denied.
	fmt.Printf("\n$ kubectl patch aq team-alpha --type=json -p '[{\"op\":\"replace\",\"path\":\"/spec/budgets/0/nominal\",\"value\":\"20\"}]'\n")
	_, stderr, _ := c.KubectlOutput(ctx, "patch", "aq", "team-alpha", "--type=json", "-p", `[{"op":"replace","path":"/spec/budgets/0/nominal","value":"20"}]`)
	fmt.Print(stderr)
	fmt.Println()
	return m, nil
}
