package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// The fleet walk-through of docs/install.md is run here as written: each
// runnable block ("# fleet-STEP: WAY" on its first line) in bash, in a
// folder that holds the checkout's chart and go.mod, with kubectl and helm
// on PATH and a kubeconfig whose contexts name the clusters (plane, east,
// west, south). No kubelet runs, so once a block has installed a release,
// the test runs its Deployment as processes (localcluster.Pod) and points
// its webhook at them: what the cluster's own nodes would do.

// docBlock is one runnable block of the walk-through.
type docBlock struct {
	step, way, text string
}

var fleetBlock = regexp.MustCompile("(?s)```sh\n(# fleet-([a-z]+): ([a-z]+)\n.*?)```")

// walkthrough reads the blocks of docs/install.md, in order.
func walkthrough(t *testing.T) []docBlock {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	for _, m := range fleetBlock.FindAllStringSubmatch(string(data), -1) {
		out = append(out, docBlock{step: m[2], way: m[3], text: m[1]})
	}
	if len(out) == 0 {
		t.Fatal("docs/install.md has no fleet walk-through blocks")
	}
	return out
}

// docRun runs the walk-through's blocks against named clusters.
type docRun struct {
	t      *testing.T
	way    string
	blocks []docBlock
	dir    string
	env    []string
	// clusters by context name.
	clusters map[string]*localcluster.Cluster
}

func newDocRun(t *testing.T, way string, clusters map[string]*localcluster.Cluster) *docRun {
	t.Helper()
	ctx := context.Background()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"charts", "go.mod", "go.sum"} {
		if err := os.Symlink(filepath.Join(root, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	for name, c := range clusters {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "plane"
	kubeconfig := filepath.Join(t.TempDir(), "fleet.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	helm, err := localcluster.EnsureHelm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// kubectl ome, for the blocks that run the plugin (fleet-release).
	plugin, err := localcluster.BuildPlugin(ctx, filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{clusters["plane"].BinDir, filepath.Dir(helm), filepath.Dir(plugin), os.Getenv("PATH")}, string(os.PathListSeparator))
	env := append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+path, "HELM_CONFIG_HOME="+filepath.Join(dir, ".helm"),
		"HELM_CACHE_HOME="+filepath.Join(dir, ".helm-cache"), "HELM_DATA_HOME="+filepath.Join(dir, ".helm-data"))
	// The chart installs the admission ledger's CRD itself; the one each
	// local control plane installs would fail helm's ownership check.
	for _, c := range clusters {
		if _, stderr, err := c.KubectlOutput(ctx, "delete", "crd", "admissionledgers.ome.io", "--ignore-not-found", "--wait"); err != nil {
			t.Fatalf("deleting the ledger's CRD: %v: %s", err, stderr)
		}
	}
	return &docRun{t: t, way: way, blocks: walkthrough(t), dir: dir, env: env, clusters: clusters}
}

// run runs the walk-through's blocks of step for the run's way (and those
// for both ways), for cluster when a block is written for each member
// ("CLUSTER=east" on its second line). It returns what they printed.
func (d *docRun) run(step, cluster string) string {
	d.t.Helper()
	var out strings.Builder
	n := 0
	for _, b := range d.blocks {
		if b.step != step || (b.way != d.way && b.way != "both") {
			continue
		}
		n++
		text := b.text
		if lines := strings.SplitN(text, "\n", 3); len(lines) == 3 && strings.HasPrefix(lines[1], "CLUSTER=") {
			if cluster == "" {
				d.t.Fatalf("the fleet-%s block for %s is written per member: name one", step, b.way)
			}
			text = lines[0] + "\nCLUSTER=" + cluster + "\n" + lines[2]
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", text)
		cmd.Dir, cmd.Env = d.dir, d.env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			d.t.Fatalf("the fleet-%s: %s block of docs/install.md (CLUSTER=%s) failed: %v\n--- block ---\n%s--- stdout ---\n%s--- stderr ---\n%s",
				step, b.way, cluster, err, text, stdout.String(), stderr.String())
		}
		d.t.Logf("fleet-%s: %s (%s) ran in %s", step, b.way, cluster, time.Since(start).Round(time.Millisecond))
		out.WriteString(stdout.String())
	}
	if n == 0 {
		d.t.Fatalf("docs/install.md has no fleet-%s block for %s", step, d.way)
	}
	return out.String()
}

// release is a release the walk-through installed, its Deployment run as
// processes.
type release struct {
	c        *localcluster.Cluster
	pod      *localcluster.Pod
	logs     string
	replicas map[string]*localcluster.Manager
	ports    map[string]localcluster.PodPorts
	service  *localcluster.Service
	// services are the webhooks' Service references the chart wrote,
	// while pointWebhook has them call the stand-in instead.
	services map[string]*admissionregistrationv1.ServiceReference
}

// runRelease runs n replicas of the release's Deployment in namespace ome
// of c, named prefix-0, prefix-1, ..., with the ServiceAccount's token,
// and points its webhook at them, through a stand-in for its Service.
func runRelease(t *testing.T, c *localcluster.Cluster, prefix string, n int, image map[string]string) *release {
	t.Helper()
	ctx := context.Background()
	d, err := c.Kube.AppsV1().Deployments("ome").Get(ctx, "ome-quota-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := c.WriteServiceAccountKubeconfig(ctx, "ome", "ome-quota-manager", kubeconfig); err != nil {
		t.Fatal(err)
	}
	r := &release{c: c, logs: t.TempDir(), replicas: map[string]*localcluster.Manager{}, ports: map[string]localcluster.PodPorts{},
		pod: &localcluster.Pod{Cluster: c, Deployment: d, Bin: member.ManagerBin, Kubeconfig: kubeconfig, Image: image}}
	var backends []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		ports, err := localcluster.NewPodPorts()
		if err != nil {
			t.Fatal(err)
		}
		r.ports[name] = ports
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", ports.Webhook))
		r.launch(t, name)
	}
	if r.service, err = localcluster.NewService(backends...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.service.Close)
	r.pointWebhook(t)
	for name, m := range r.replicas {
		if err := m.WaitReady(ctx, 2*time.Minute); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return r
}

func (r *release) launch(t *testing.T, name string) {
	t.Helper()
	m, err := r.pod.Launch(context.Background(), name, r.logs, r.ports[name])
	if err != nil {
		t.Fatal(err)
	}
	r.replicas[name] = m
	t.Cleanup(func() {
		m.Stop()
		// The chart's RBAC lets each replica do all it does.
		if data, err := os.ReadFile(m.Log); err != nil || bytes.Contains(data, []byte("is forbidden: User")) {
			t.Errorf("%s's log cannot be read (%v) or shows a request its RBAC refused:\n%s", name, err, m.Tail(40))
		}
		if t.Failed() {
			t.Logf("--- %s's log (last lines) ---\n%s", name, m.Tail(40))
		}
	})
}

// pointWebhook has the API server call the release's webhook through the
// stand-in for its Service: no Service has endpoints without a kubelet.
func (r *release) pointWebhook(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	vwcs := r.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	testutil.Eventually(t, 30*time.Second, func() string {
		cfg, err := vwcs.Get(ctx, "ome-quota-manager.ome.io", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if r.services == nil {
			r.services = map[string]*admissionregistrationv1.ServiceReference{}
		}
		for i := range cfg.Webhooks {
			cc := &cfg.Webhooks[i].ClientConfig
			if cc.Service == nil {
				continue
			}
			r.services[cfg.Webhooks[i].Name] = cc.Service
			url := fmt.Sprintf("https://%s%s", r.service.Addr, *cc.Service.Path)
			cc.Service, cc.URL = nil, &url
		}
		if _, err := vwcs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return err.Error()
		} else if err != nil {
			return "conflict: " + err.Error()
		}
		return ""
	})
}

// upgrade runs f (a block that upgrades the release) with the webhook's
// configuration as the chart wrote it, which helm's server-side apply
// expects to find, then points it at the replicas again.
func (r *release) upgrade(t *testing.T, f func()) {
	t.Helper()
	ctx := context.Background()
	vwcs := r.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	testutil.Eventually(t, 30*time.Second, func() string {
		cfg, err := vwcs.Get(ctx, "ome-quota-manager.ome.io", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for i := range cfg.Webhooks {
			if svc := r.services[cfg.Webhooks[i].Name]; svc != nil {
				cfg.Webhooks[i].ClientConfig.Service, cfg.Webhooks[i].ClientConfig.URL = svc, nil
			}
		}
		if _, err := vwcs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})
	f()
	r.pointWebhook(t)
}

// leader is the replica that holds the release's Lease, once it is not
// the one named not (a replica killed, whose Lease has yet to expire).
func (r *release) leader(t *testing.T, not string) string {
	t.Helper()
	var holder string
	testutil.Eventually(t, time.Minute, func() string {
		l, err := r.c.Kube.CoordinationV1().Leases("ome").Get(context.Background(), "ome-quota-manager", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if l.Spec.HolderIdentity == nil || r.replicas[*l.Spec.HolderIdentity] == nil || *l.Spec.HolderIdentity == not {
			return fmt.Sprintf("no replica of this run but %q holds the Lease: %v", not, l.Spec.HolderIdentity)
		}
		holder = *l.Spec.HolderIdentity
		return ""
	})
	return holder
}

// eventLog is the folder of replica name's event log.
func (r *release) eventLog(t *testing.T, name string) string {
	t.Helper()
	var dir string
	for _, a := range r.pod.Deployment.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--event-log="); ok {
			dir = strings.ReplaceAll(v, "$(POD_NAME)", name)
		}
	}
	if dir == "" {
		t.Fatal("the release records no event log")
	}
	return filepath.Join(r.logs, name+"-fs", dir)
}
