package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/chart"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// planeValues are a plane's values with its members' kubeconfig Secrets.
func planeValues(clusters ...string) string {
	v := "global:\n  hub: registry.example.com/ome\nquotaManager:\n  mode: management\n  image:\n    tag: dev\n  projection:\n    origin: fleet-1\n    clusters:\n"
	for _, c := range clusters {
		v += fmt.Sprintf("      - name: %s\n        secretName: %s-kubeconfig\n", c, c)
	}
	return v
}

// memberKubeconfig is what docs/install.md builds for the plane: the
// member's server and CA, and a TokenRequest token of the remote-access
// ServiceAccount bound to the Secret whose deletion revokes it.
func memberKubeconfig(ctx context.Context, t *testing.T, member *localcluster.Cluster) []byte {
	t.Helper()
	token, stderr, err := member.KubectlOutput(ctx, "-n", ns, "create", "token", "ome-quota-manager-remote-access", "--duration=1h",
		"--bound-object-kind=Secret", "--bound-object-name=ome-quota-manager-remote-access-binding")
	require.NoError(t, err, stderr)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["east"] = &clientcmdapi.Cluster{Server: member.Config.Host, CertificateAuthorityData: member.Config.CAData}
	cfg.AuthInfos["ome-quota-manager-plane"] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	cfg.Contexts["east"] = &clientcmdapi.Context{Cluster: "east", AuthInfo: "ome-quota-manager-plane"}
	cfg.CurrentContext = "east"
	data, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return data
}

// TestPlaneFromChart installs a management plane with the chart (webhook
// on, two replicas, members from kubeconfig Secrets) on this package's API
// server and runs its Deployment as two processes under the chart's
// ServiceAccount, against a member cluster of its own whose workload
// manager runs beside it and whose remoteAccess identity the plane uses.
// The plane projects a team there; its webhook judges the fleet tree; a
// kubeconfig Secret rewritten with a new token is used without a restart;
// a helm upgrade that drops the member leaves the Deployment's pods as
// they were and the plane deletes the member's copies; neither replica is
// refused anything.
func TestPlaneFromChart(t *testing.T) {
	ctx := context.Background()
	w := newWorkdir(t)
	logs := t.TempDir()
	// Last: the webhook's Secret, which helm uninstall keeps.
	t.Cleanup(func() { _, _, _ = kubectl(t, "", "delete", "secret", "-n", ns, secret, "--ignore-not-found") })

	// The member: its own API server, the guide's flavor and nodes, its
	// workload manager, and what remoteAccess renders on it.
	member, err := localcluster.Start(ctx, localcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = member.Stop() })
	require.NoError(t, localcluster.WriteDemoCluster(ctx, member))
	mm, err := member.StartManager(ctx, cluster.ManagerBin, "east", logs, "--webhook=false")
	require.NoError(t, err)
	t.Cleanup(mm.Stop)
	r, err := chart.Render(ns, nil, "quotaManager.mode=workload", "quotaManager.remoteAccess.enabled=true")
	require.NoError(t, err)
	var objs []string
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		o := r.Get(kind, "ome-quota-manager-remote-access")
		require.NotNil(t, o, kind)
		data, err := yaml.Marshal(o.Object)
		require.NoError(t, err)
		objs = append(objs, string(data))
	}
	_, stderr, err := member.KubectlInput(ctx, strings.Join(objs, "---\n"), "apply", "-f", "-")
	require.NoError(t, err, stderr)
	_, err = member.Kubectl(ctx, "-n", ns, "create", "secret", "generic", "ome-quota-manager-remote-access-binding")
	require.NoError(t, err)

	// The plane's access to it, then the plane. ghost is listed, and has
	// no Secret, so that east can be dropped while the plane keeps a
	// member.
	secrets := cluster.Kube.CoreV1().Secrets(ns)
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "east-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": memberKubeconfig(ctx, t, member)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = secrets.Delete(ctx, "east-kubeconfig", metav1.DeleteOptions{}) })
	values := filepath.Join(w.dir, "quota-values.yaml")
	require.NoError(t, os.WriteFile(values, []byte(planeValues("east", "ghost")), 0o644))
	w.helm(t, installServerSide)
	t.Cleanup(func() { _, _ = w.run(t, uninstall) })
	d := getDeployment(ctx, t)
	require.Equal(t, int32(2), *d.Spec.Replicas)

	args, env := container(ctx, t)
	kubeconfig := saKubeconfig(ctx, t)
	var replicas []*localcluster.Manager
	var ports []int
	for i := range 2 {
		p, err := localcluster.FreePort()
		require.NoError(t, err)
		ports = append(ports, p)
		replicas = append(replicas, launch(t, fmt.Sprintf("plane-%d", i), logs, kubeconfig, args, env, p))
	}
	for _, m := range replicas {
		require.NoError(t, m.WaitReady(ctx, 2*time.Minute))
	}
	vwcs := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := vwcs.Get(ctx, vwcName, metav1.GetOptions{})
	require.NoError(t, err)
	service := cfg.DeepCopy()
	for i := range cfg.Webhooks {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", ports[0], *cfg.Webhooks[i].ClientConfig.Service.Path)
		cfg.Webhooks[i].ClientConfig.Service = nil
		cfg.Webhooks[i].ClientConfig.URL = &url
	}
	_, err = vwcs.Update(ctx, cfg, metav1.UpdateOptions{})
	require.NoError(t, err)

	// A fleet tree on the plane: its team's share reaches the member.
	tree := `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: fleet-c
spec:
  role: Cohort
  parentRef:
    name: root
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "16"
---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: fleet-a
spec:
  role: ClusterQueue
  parentRef:
    name: fleet-c
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "%s"
      policy: Explicit
      perCluster:
        - cluster: east
          nominal: "%s"
`
	// copies lists the member's copies of fleet-1, each with its budgets'
	// nominal amounts.
	copies := func() string {
		out, _, _ := member.KubectlOutput(ctx, "get", "aq", "-l", v1beta1.OriginLabel+"=fleet-1",
			"-o", `jsonpath={range .items[*]}{.metadata.name}=[{.spec.budgets[*].nominal}] {end}`)
		return strings.TrimSpace(out)
	}
	t.Run("a team's share reaches the member", func(t *testing.T) {
		testutil.Eventually(t, time.Minute, func() string {
			out, _, _ := kubectl(t, "", "get", "aq", "root", "-o", `jsonpath={range .status.capacity[*].perCluster[*]}{.cluster}={.allocatable}{" "}{end}`)
			if !strings.Contains(out, "east=32") {
				return "the plane's root has not heard from east: " + out
			}
			return ""
		})
		mustKubectl(t, fmt.Sprintf(tree, "8", "8"), "apply", "-f", "-")
		testutil.Eventually(t, time.Minute, func() string {
			if got := copies(); got != "fleet-a=[8] fleet-c=[]" {
				return "the member's copies of fleet-1: " + got
			}
			return ""
		})
	})

	t.Run("the plane's webhook judges the fleet tree", func(t *testing.T) {
		_, stderr, err := kubectl(t, fmt.Sprintf(tree, "20", "8"), "apply", "-f", "-")
		require.Error(t, err)
		require.Contains(t, stderr, `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request`)
		require.Contains(t, stderr, "fleet-c")
	})

	t.Run("a rewritten kubeconfig Secret is used without a restart", func(t *testing.T) {
		// Revoke the plane's token (the Secret it is bound to goes), then
		// write a new one bound to a new binding Secret.
		_, err := member.Kubectl(ctx, "-n", ns, "delete", "secret", "ome-quota-manager-remote-access-binding")
		require.NoError(t, err)
		_, err = member.Kubectl(ctx, "-n", ns, "create", "secret", "generic", "ome-quota-manager-remote-access-binding")
		require.NoError(t, err)
		s, err := secrets.Get(ctx, "east-kubeconfig", metav1.GetOptions{})
		require.NoError(t, err)
		s.Data["kubeconfig"] = memberKubeconfig(ctx, t, member)
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		require.NoError(t, err)
		mustKubectl(t, fmt.Sprintf(tree, "8", "6"), "apply", "-f", "-")
		testutil.Eventually(t, time.Minute, func() string {
			if got := copies(); got != "fleet-a=[6] fleet-c=[]" {
				return "the member's copies of fleet-1: " + got
			}
			return ""
		})
		for _, m := range replicas {
			select {
			case <-m.Done():
				t.Fatalf("%s exited", m.Name)
			default:
			}
			log, err := os.ReadFile(m.Log)
			require.NoError(t, err)
			require.Contains(t, string(log), `"the way to reach a member changed: watching it anew" member="east"`, "%s's log", m.Name)
		}
	})

	t.Run("a helm upgrade that drops the member deletes its copies and restarts nothing", func(t *testing.T) {
		// helm's apply would merge the Service back beside the URL.
		now, err := vwcs.Get(ctx, vwcName, metav1.GetOptions{})
		require.NoError(t, err)
		for i := range now.Webhooks {
			now.Webhooks[i].ClientConfig = service.Webhooks[i].ClientConfig
			now.Webhooks[i].ClientConfig.CABundle = cfg.Webhooks[i].ClientConfig.CABundle
		}
		_, err = vwcs.Update(ctx, now, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(values, []byte(planeValues("ghost")), 0o644))
		require.Contains(t, w.helm(t, upgrade), `Release "ome-quota-manager" has been upgraded.`)
		require.Equal(t, d.Generation, getDeployment(ctx, t).Generation, "the pods' template changed")
		testutil.Eventually(t, time.Minute, func() string {
			if got := copies(); got != "" {
				return "the member still holds copies of fleet-1: " + got
			}
			return ""
		})
		_, err = cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "ome-quota-manager-members", metav1.GetOptions{})
		require.NoError(t, err)
	})

	for _, m := range replicas {
		stopClean(t, m)
	}
	// The plane's tree goes with the test.
	for _, name := range []string{"fleet-a", "fleet-c"} {
		_, _, _ = kubectl(t, "", "delete", "aq", name, "--ignore-not-found")
	}
	_, _, _ = kubectl(t, "", "patch", "aq", "root", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	_, _, _ = kubectl(t, "", "delete", "aq", "root", "--ignore-not-found")
}
