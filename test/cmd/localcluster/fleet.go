package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/test/chart"
	"ome.io/quota-manager/test/localcluster"
)

// fleetDemo is what `up --fleet` runs: a management plane and two member
// clusters, each its own etcd and kube-apiserver, the members with Kueue
// and a workload-mode manager, the plane reaching them through
// ClusterProfiles and the secret-reader credential plugin, and a small
// fleet tree.
type fleetDemo struct {
	dir      string // the demo's own files (binaries, kubeconfig, manifests)
	clusters map[string]*localcluster.Cluster
	managers []*localcluster.Manager
}

// demoMembers are the member clusters and their A100 nodes of 8 GPUs.
var demoMembers = []struct {
	name  string
	nodes int
}{{"east", 2}, {"west", 1}}

// fleetTree is the demo's fleet tree: a Cohort of 24 GPUs and two teams,
// one split Explicit, one Proportional to the members' capacity.
const fleetTree = `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: research
spec:
  role: Cohort
  parentRef:
    name: root
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "24"
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: team-vision
spec:
  role: ClusterQueue
  parentRef:
    name: research
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "10"
      policy: Explicit
      perCluster:
        - cluster: east
          nominal: "8"
        - cluster: west
          nominal: "2"
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: team-speech
spec:
  role: ClusterQueue
  parentRef:
    name: research
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "12"
      policy: Proportional
`

// addedNode is the Node the demo tells the user to add to west: 8 more
// A100 GPUs, which move team-speech's Proportional shares.
const addedNode = `apiVersion: v1
kind: Node
metadata:
  name: west-gpu-2
  labels:
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
status:
  capacity:
    nvidia.com/gpu: "8"
    cpu: "64"
    memory: 512Gi
    pods: "110"
  allocatable:
    nvidia.com/gpu: "8"
    cpu: "64"
    memory: 512Gi
    pods: "110"
  conditions:
    - type: Ready
      status: "True"
      reason: KubeletReady
      message: the demo's fake kubelet is ready
`

// runFleet starts the fleet and prints how to look at it; stop stops
// every process it started.
func runFleet(ctx context.Context, dir string) (f *fleetDemo, err error) {
	f = &fleetDemo{dir: dir, clusters: map[string]*localcluster.Cluster{}}
	say := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	say("starting three control planes (plane, east and west), with Kueue on the members, and building ome-quota-manager, kubectl-ome and the secret-reader plugin...")
	type built struct {
		path string
		err  error
	}
	bins := map[string]*built{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := func(name string, opts localcluster.Options) {
		defer wg.Done()
		c, err := localcluster.Start(ctx, opts)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bins["cluster "+name] = &built{err: err}
			return
		}
		f.clusters[name] = c
	}
	wg.Add(3)
	go start("plane", localcluster.Options{})
	go start("east", localcluster.Options{Kueue: true})
	go start("west", localcluster.Options{Kueue: true})
	binDir := filepath.Join(dir, "bin")
	for name, build := range map[string]func(context.Context, string) (string, error){
		"ome-quota-manager": localcluster.BuildManager, "secretreader-plugin": localcluster.BuildSecretReader, "kubectl-ome": localcluster.BuildPlugin,
	} {
		p, err := build(ctx, binDir)
		bins[name] = &built{path: p, err: err}
	}
	wg.Wait()
	for what, b := range bins {
		if b.err != nil {
			return f, fmt.Errorf("%s: %w", what, b.err)
		}
	}
	plane := f.clusters["plane"]
	if err := os.Symlink(filepath.Join(plane.BinDir, "kubectl"), filepath.Join(binDir, "kubectl")); err != nil {
		return f, err
	}

	// The members: nodes, the flavor, remoteAccess's identity and a
	// workload-mode manager with its webhook.
	for _, m := range demoMembers {
		c := f.clusters[m.name]
		for i := range m.nodes {
			if _, err := localcluster.ApplyNode(ctx, c.Kube, localcluster.GPUNode(fmt.Sprintf("%s-gpu-%d", m.name, i), 8)); err != nil {
				return f, err
			}
		}
		if _, err := c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
			return f, err
		}
		if err := c.EnsureNamespaces(ctx, "ml-serving", "ome"); err != nil {
			return f, err
		}
		if err := remoteAccess(ctx, c); err != nil {
			return f, fmt.Errorf("%s: %w", m.name, err)
		}
		port, err := localcluster.FreePort()
		if err != nil {
			return f, err
		}
		if err := c.InstallWebhook(ctx, port); err != nil {
			return f, err
		}
		mm, err := c.StartManager(ctx, bins["ome-quota-manager"].path, m.name, dir, append(localcluster.WebhookFlags(port),
			"--enrolled-namespaces=ml-serving", "--webhook-projection-writers=system:serviceaccount:ome:ome-quota-manager-remote-access")...)
		if err != nil {
			return f, fmt.Errorf("%s's manager: %w", m.name, err)
		}
		f.managers = append(f.managers, mm)
	}

	// The plane: the ClusterProfile CRD, each member's token and profile,
	// and the management-mode manager with its webhook.
	if err := installProfileCRD(ctx, plane); err != nil {
		return f, err
	}
	if err := plane.EnsureNamespace(ctx, "ome"); err != nil {
		return f, err
	}
	for _, m := range demoMembers {
		if err := registerProfile(ctx, plane, f.clusters[m.name], m.name); err != nil {
			return f, fmt.Errorf("%s's ClusterProfile: %w", m.name, err)
		}
	}
	providers := filepath.Join(dir, "credential-providers.json")
	data, err := json.Marshal(map[string]any{"providers": []any{map[string]any{"name": "secretreader", "execConfig": map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1", "command": bins["secretreader-plugin"].path, "provideClusterInfo": true}}}})
	if err != nil {
		return f, err
	}
	if err := os.WriteFile(providers, data, 0o600); err != nil {
		return f, err
	}
	// The plugin reads the tokens in the plane's namespace, as its
	// kubeconfig's context names it.
	pluginKubeconfig := filepath.Join(dir, "plane-plugin.kubeconfig")
	if err := withNamespace(plane.Kubeconfig, pluginKubeconfig, "ome"); err != nil {
		return f, err
	}
	port, err := localcluster.FreePort()
	if err != nil {
		return f, err
	}
	if err := plane.InstallWebhook(ctx, port); err != nil {
		return f, err
	}
	pm, err := plane.StartManagerEnv(ctx, bins["ome-quota-manager"].path, "plane", dir, []string{"KUBECONFIG=" + pluginKubeconfig},
		append(localcluster.WebhookFlags(port), "--mode=management", "--members-from=clusterprofiles", "--clusterprofile-namespace=ome",
			"--clusterprofile-provider-file="+providers, "--origin=demo-plane")...)
	if err != nil {
		return f, fmt.Errorf("the plane's manager: %w", err)
	}
	f.managers = append(f.managers, pm)

	// The fleet tree, once the plane has heard from both members.
	show := func(c *localcluster.Cluster, args ...string) (string, error) {
		out, err := c.Kubectl(ctx, args...)
		return out, err
	}
	say("waiting for the plane to hear from east and west...")
	capacity := `jsonpath={range .status.capacity[*]}{.resourceName}@{.resourceFlavor}:{range .perCluster[*]} {.cluster}={.allocatable}{end}{"\n"}{end}`
	if err := wait(ctx, time.Minute, func() bool {
		out, _ := show(plane, "get", "aq", "root", "-o", capacity)
		return strings.Contains(out, "east=16") && strings.Contains(out, "west=8")
	}); err != nil {
		return f, fmt.Errorf("the plane did not hear from both members: see %s", pm.Log)
	}
	if _, stderr, err := plane.KubectlInput(ctx, fleetTree, "apply", "-f", "-"); err != nil {
		return f, fmt.Errorf("applying the fleet tree: %v: %s", err, stderr)
	}
	if err := wait(ctx, time.Minute, func() bool {
		e, _ := show(f.clusters["east"], "get", "clusterqueues.kueue.x-k8s.io", "-o", "name")
		w, _ := show(f.clusters["west"], "get", "clusterqueues.kueue.x-k8s.io", "-o", "name")
		return strings.Count(e, "team-") == 2 && strings.Count(w, "team-") == 2
	}); err != nil {
		return f, fmt.Errorf("the members have no ClusterQueues for the fleet's teams: see %s", pm.Log)
	}
	// A member's copy is created at zero and raised once the plane has
	// recorded the raise, so the demo is up when every share has landed.
	shares := map[string][]string{
		"east": {"team-speech:8", "team-vision:8"},
		"west": {"team-speech:4", "team-vision:2"},
	}
	nominal := `jsonpath={range .items[*]}{.metadata.name}:{.spec.budgets[0].nominal}{"\n"}{end}`
	if err := wait(ctx, time.Minute, func() bool {
		for member, want := range shares {
			out, _ := show(f.clusters[member], "get", "aq", "-o", nominal)
			for _, w := range want {
				if !strings.Contains(out, w+"\n") {
					return false
				}
			}
		}
		return true
	}); err != nil {
		return f, fmt.Errorf("the fleet's shares did not reach the members: see %s", pm.Log)
	}
	if err := os.WriteFile(filepath.Join(dir, "west-gpu-2.yaml"), []byte(addedNode), 0o600); err != nil {
		return f, err
	}
	return f, f.writeKubeconfig(filepath.Join(dir, "kubeconfig"))
}

// stop stops the managers, then the control planes.
func (f *fleetDemo) stop() error {
	for i := len(f.managers) - 1; i >= 0; i-- {
		f.managers[i].Stop()
	}
	var first error
	for _, c := range f.clusters {
		if err := c.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// writeKubeconfig writes one kubeconfig with a context per cluster.
func (f *fleetDemo) writeKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	for name, c := range f.clusters {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "plane"
	return clientcmd.WriteToFile(*cfg, path)
}

// remoteAccess creates on a member what the chart's remoteAccess values
// render: the plane's ServiceAccount, its ClusterRole and binding, in
// namespace ome.
func remoteAccess(ctx context.Context, c *localcluster.Cluster) error {
	r, err := chart.Render("ome", nil, "quotaManager.mode=workload", "quotaManager.remoteAccess.enabled=true")
	if err != nil {
		return err
	}
	var docs []string
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		o := r.Get(kind, "ome-quota-manager-remote-access")
		if o == nil {
			return fmt.Errorf("the chart renders no %s ome-quota-manager-remote-access", kind)
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(data))
	}
	if _, stderr, err := c.KubectlInput(ctx, strings.Join(docs, "---\n"), "apply", "-f", "-"); err != nil {
		return fmt.Errorf("%v: %s", err, stderr)
	}
	return nil
}

// installProfileCRD installs the ClusterProfile CRD from the cluster
// inventory API's module.
func installProfileCRD(ctx context.Context, c *localcluster.Cluster) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("finding the cluster inventory API's module: %w", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")
	if _, stderr, err := c.KubectlOutput(ctx, "apply", "--server-side", "-f", crd); err != nil {
		return fmt.Errorf("installing the ClusterProfile CRD: %v: %s", err, stderr)
	}
	_, stderr, err := c.KubectlOutput(ctx, "wait", "--for=condition=Established", "crd/clusterprofiles.multicluster.x-k8s.io", "--timeout=60s")
	if err != nil {
		return fmt.Errorf("%v: %s", err, stderr)
	}
	return nil
}

// registerProfile mints a token of member's remote-access identity, keeps
// it on the plane in the Secret the secret-reader plugin reads, and
// writes the member's ClusterProfile with its access provider.
func registerProfile(ctx context.Context, plane, member *localcluster.Cluster, name string) error {
	token, err := member.ServiceAccountToken(ctx, "ome", "ome-quota-manager-remote-access")
	if err != nil {
		return err
	}
	if _, err := plane.Kube.CoreV1().Secrets("ome").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ome"},
		Data: map[string][]byte{"token": []byte(token)}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	profile := fmt.Sprintf(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ClusterProfile
metadata:
  name: %s
  namespace: ome
spec:
  displayName: %s
  clusterManager:
    name: make-demo-fleet
`, name, name)
	if _, stderr, err := plane.KubectlInput(ctx, profile, "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("%v: %s", err, stderr)
	}
	status := fmt.Sprintf(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ClusterProfile
metadata:
  name: %s
  namespace: ome
status:
  conditions:
    - type: ControlPlaneHealthy
      status: "True"
      reason: Demo
      message: the demo started it
      lastTransitionTime: %q
  accessProviders:
    - name: secretreader
      cluster:
        server: %s
        certificate-authority-data: %s
        extensions:
          - name: client.authentication.k8s.io/exec
            extension:
              clusterName: %s
`, name, time.Now().UTC().Format(time.RFC3339), member.Config.Host, base64.StdEncoding.EncodeToString(member.Config.CAData), name)
	if _, stderr, err := plane.KubectlInput(ctx, status, "apply", "--server-side", "--subresource=status", "-f", "-"); err != nil {
		return fmt.Errorf("%v: %s", err, stderr)
	}
	return nil
}

// withNamespace writes a copy of the kubeconfig at in whose contexts name
// namespace ns.
func withNamespace(in, out, ns string) error {
	cfg, err := clientcmd.LoadFromFile(in)
	if err != nil {
		return err
	}
	for _, c := range cfg.Contexts {
		c.Namespace = ns
	}
	return clientcmd.WriteToFile(*cfg, out)
}

// wait polls ok every half second until it holds, ctx ends or the time
// is up.
func wait(ctx context.Context, within time.Duration, ok func() bool) error {
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %s", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}
