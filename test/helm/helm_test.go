package helm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const (
	ns        = "ome"
	saUser    = "system:serviceaccount:ome:ome-quota-manager"
	vwcName   = "ome-quota-manager.ome.io"
	secret    = "ome-quota-manager-webhook-cert"
	denialEnd = `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28`
)

func getDeployment(ctx context.Context, t *testing.T) *appsv1.Deployment {
	t.Helper()
	d, err := cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
	require.NoError(t, err)
	return d
}

func vwcExists(ctx context.Context, t *testing.T) bool {
	t.Helper()
	_, err := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwcName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// allAccepted checks that every object of the release's manifest is in the
// cluster, as the apiserver validated and stored it.
func allAccepted(t *testing.T, w *workdir) {
	t.Helper()
	manifest := w.helm(t, "helm get manifest ome-quota-manager -n ome")
	out := testutil.MustKubectl(t, cluster, manifest, "get", "-f", "-", "-o", "name")
	kinds := regexp.MustCompile(`(?m)^kind: (\w+)`).FindAllString(manifest, -1)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), len(kinds), "every object of the manifest exists:\n%s", out)
}

// applyOperation says how helm wrote the Deployment: "Apply" for
// server-side apply, "Update" for a client-side create or patch.
func applyOperation(ctx context.Context, t *testing.T) string {
	for _, f := range getDeployment(ctx, t).ManagedFields {
		if f.Manager == "helm" {
			return string(f.Operation)
		}
	}
	t.Fatal("the Deployment has no fields managed by helm")
	return ""
}

// TestGuideHelmCommands runs the guide's helm commands on the local
// apiserver, then the chart's Deployment as two processes with the chart's
// ServiceAccount, then uninstalls.
func TestGuideHelmCommands(t *testing.T) {
	ctx := context.Background()
	w := newWorkdir(t)

	t.Run("without a mode, nothing is installed", func(t *testing.T) {
		require.NoError(t, os.WriteFile(filepath.Join(w.dir, "quota-values.yaml"), []byte("quotaManager:\n  image:\n    tag: dev\n"), 0o644))
		out := w.helmFails(t, installServerSide)
		first, _, _ := strings.Cut(out, "\n")
		require.True(t, strings.HasSuffix(first, `quotaManager.mode must be "workload" or "management", got ""`), out)
		_, err := cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "%v", err)
	})

	t.Run("helm lint --strict", func(t *testing.T) {
		w.values(t, "install.yaml")
		out := w.helm(t, "helm lint --strict ./charts/ome-quota-manager -f quota-values.yaml")
		require.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
		require.NotContains(t, out, "[WARNING]")
		require.NotContains(t, out, "[ERROR]")
	})

	t.Run("install, client-side apply", func(t *testing.T) {
		w.values(t, "install.yaml")
		out := w.helm(t, installClientSide)
		require.Contains(t, out, "STATUS: deployed")
		require.Contains(t, out, "NOTE: this release does not install the AcceleratorQuota CRD")
		// The NetworkPolicy's lookup reads the EndpointSlice, not the
		// deprecated Endpoints, which would print a warning.
		require.NotContains(t, out, "Endpoints is deprecated")
		require.Equal(t, "Update", applyOperation(ctx, t))
		allAccepted(t, w)
		require.True(t, vwcExists(ctx, t))
	})

	t.Run("uninstall keeps the Secret", func(t *testing.T) {
		out := w.helm(t, uninstall)
		require.Contains(t, out, "These resources were kept due to the resource policy:\n[Secret] "+secret)
		require.Contains(t, out, `release "ome-quota-manager" uninstalled`)
		_, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		require.NoError(t, err)
		require.False(t, vwcExists(ctx, t))
		_, err = cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the Deployment is gone: %v", err)
	})

	t.Run("install, server-side apply, adopting the kept Secret", func(t *testing.T) {
		out := w.helm(t, installServerSide)
		require.Contains(t, out, "STATUS: deployed")
		require.Equal(t, "Apply", applyOperation(ctx, t))
		allAccepted(t, w)
	})

	t.Run("upgrade: hysteresisPercent 0", func(t *testing.T) {
		w.values(t, "hysteresis-0.yaml")
		out := w.helm(t, upgrade)
		require.Contains(t, out, `Release "ome-quota-manager" has been upgraded.`)
		require.Contains(t, getDeployment(ctx, t).Spec.Template.Spec.Containers[0].Args, "--capacity-hysteresis-percent=0")
		allAccepted(t, w)
	})

	t.Run("upgrade: webhook disabled removes the ValidatingWebhookConfiguration", func(t *testing.T) {
		w.values(t, "webhook-disabled.yaml")
		out := w.helm(t, upgrade)
		require.Contains(t, out, `Release "ome-quota-manager" has been upgraded.`)
		require.False(t, vwcExists(ctx, t))
		require.Contains(t, getDeployment(ctx, t).Spec.Template.Spec.Containers[0].Args, "--webhook=false")
		_, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		require.NoError(t, err, "the Secret stays")
		allAccepted(t, w)

		// The pod without the webhook becomes ready, with the RBAC this
		// release leaves it (no Secret, no webhook configuration).
		port, err := localcluster.FreePort()
		require.NoError(t, err)
		m := launch(ctx, t, "no-webhook", t.TempDir(), saKubeconfig(ctx, t), port)
		require.NoError(t, m.WaitReady(ctx, 2*time.Minute))
		stopClean(t, m)
	})

	t.Run("upgrade: webhook enabled restores it, and the Secret when it was deleted", func(t *testing.T) {
		require.NoError(t, cluster.Kube.CoreV1().Secrets(ns).Delete(ctx, secret, metav1.DeleteOptions{}))
		w.values(t, "install.yaml")
		out := w.helm(t, upgrade)
		require.Contains(t, out, `Release "ome-quota-manager" has been upgraded.`)
		require.True(t, vwcExists(ctx, t))
		s, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		require.NoError(t, err, "the upgrade recreates the Secret")
		require.Empty(t, s.Data)
		require.Equal(t, "ome-quota-manager", s.Labels["ome.io/quota-managed-by"])
		require.Contains(t, getDeployment(ctx, t).Spec.Template.Spec.Containers[0].Args, "--webhook=true")
		allAccepted(t, w)
	})

	t.Run("the NetworkPolicy admits the API server's addresses to the webhook port", func(t *testing.T) {
		// Helm's lookup found them at install, in the kubernetes
		// EndpointSlice: the Endpoints list the same.
		want := apiServerCIDRs(ctx, t)
		require.NotEmpty(t, want)
		require.Equal(t, want, webhookSources(ctx, t))
		require.NotContains(t, w.helm(t, "helm get notes ome-quota-manager -n ome"), "admits every source")
	})

	t.Run("upgrade: apiServerCIDRs replace the Endpoints' addresses", func(t *testing.T) {
		out := w.helm(t, upgrade+" --set quotaManager.networkPolicy.apiServerCIDRs={10.0.0.0/24}")
		require.Contains(t, out, `Release "ome-quota-manager" has been upgraded.`)
		require.Equal(t, []string{"10.0.0.0/24"}, webhookSources(ctx, t))
		allAccepted(t, w)
	})

	t.Run("upgrade: the NetworkPolicy off", func(t *testing.T) {
		w.helm(t, upgrade+" --set quotaManager.networkPolicy.enabled=false")
		_, err := cluster.Kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "%v", err)
		allAccepted(t, w)
	})

	t.Run("crd.install=true fails Helm's ownership check when something else installed the CRD", func(t *testing.T) {
		out := w.helmFails(t, upgrade+" --set quotaManager.crd.install=true")
		require.Contains(t, out, `CustomResourceDefinition "acceleratorquotas.ome.io"`)
		require.Contains(t, out, "exists and cannot be imported into the current release")
	})

	t.Run("upgrade back to the guide's values", func(t *testing.T) {
		w.helm(t, upgrade)
		require.Equal(t, apiServerCIDRs(ctx, t), webhookSources(ctx, t), "the NetworkPolicy is on by default")
		require.Contains(t, w.helm(t, "helm status ome-quota-manager -n ome"), "STATUS: deployed")
		allAccepted(t, w)
	})

	t.Run("the Deployment as two processes with the chart's ServiceAccount", func(t *testing.T) {
		runReplicas(ctx, t, w)
	})

	t.Run("uninstall", func(t *testing.T) {
		out := w.helm(t, uninstall)
		require.Contains(t, out, "[Secret] "+secret)
		require.Contains(t, out, `release "ome-quota-manager" uninstalled`)
		s, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, s.Data["tls.crt"], "the kept Secret holds what the manager wrote")
	})

	// The guide's last step: four objects remain (the ResourceFlavor is the
	// admin's, so only deleting it shows it), and once they are deleted
	// nothing the product created is left.
	t.Run("the guide's clean-up leaves exactly its four objects", func(t *testing.T) {
		testutil.Eventually(t, 30*time.Second, func() string {
			want := []string{"AcceleratorQuota /root", "Cohort /root", "Secret " + ns + "/" + secret}
			if got := leftovers(ctx, t); !slices.Equal(got, want) {
				return fmt.Sprintf("after helm uninstall: %v, want %v", got, want)
			}
			return ""
		})
		testutil.MustKubectl(t, cluster, "", "patch", "aq", "root", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		testutil.MustKubectl(t, cluster, "", "delete", "aq", "root")
		testutil.MustKubectl(t, cluster, "", "delete", "cohorts.kueue.x-k8s.io", "root")
		testutil.MustKubectl(t, cluster, "", "delete", "secret", "-n", ns, secret)
		testutil.MustKubectl(t, cluster, "", "delete", "resourceflavors.kueue.x-k8s.io", "a100")
		testutil.Eventually(t, 30*time.Second, func() string {
			if got := leftovers(ctx, t); len(got) > 0 {
				return fmt.Sprintf("left after the guide's clean-up: %v", got)
			}
			return ""
		})
	})
}

// saKubeconfig writes a kubeconfig holding a TokenRequest token of the
// chart's ServiceAccount and the apiserver's CA: what the pod would mount.
func saKubeconfig(ctx context.Context, t *testing.T) string {
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	require.NoError(t, cluster.WriteServiceAccountKubeconfig(ctx, ns, "ome-quota-manager", path))
	return path
}

// launch runs the installed Deployment's container as a process named
// name, as a pod would run it (localcluster.Pod: its args and env, its
// volumes, the ServiceAccount's token), serving its webhook on
// webhookPort, with its files and log under logs. It is stopped when the
// test ends.
func launch(ctx context.Context, t *testing.T, name, logs, kubeconfig string, webhookPort int) *localcluster.Manager {
	t.Helper()
	d := getDeployment(ctx, t)
	require.Equal(t, []string{"/ome-quota-manager"}, d.Spec.Template.Spec.Containers[0].Command)
	ports, err := localcluster.NewPodPorts()
	require.NoError(t, err)
	ports.Webhook = webhookPort
	pod := &localcluster.Pod{Cluster: cluster, Deployment: d, Bin: cluster.ManagerBin, Kubeconfig: kubeconfig}
	m, err := pod.Launch(ctx, name, logs, ports)
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	return m
}

// stopClean stops a replica and checks that it ran and that the API server
// refused it nothing.
func stopClean(t *testing.T, m *localcluster.Manager) {
	m.Stop()
	data, err := os.ReadFile(m.Log)
	require.NoError(t, err)
	require.NotContains(t, strings.ToLower(string(data)), "forbidden", "%s's log", m.Name)
	require.Contains(t, string(data), "waiting for informer caches", "%s's log shows it ran", m.Name)
}

func runReplicas(ctx context.Context, t *testing.T, w *workdir) {
	kubeconfig := saKubeconfig(ctx, t)
	logs := t.TempDir()

	ports := make([]int, 2)
	for i := range ports {
		p, err := localcluster.FreePort()
		require.NoError(t, err)
		ports[i] = p
	}
	vwcs := cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()

	var replicas []*localcluster.Manager
	for i, port := range ports {
		replicas = append(replicas, launch(ctx, t, fmt.Sprintf("replica-%d", i), logs, kubeconfig, port))
	}
	for _, m := range replicas {
		require.NoError(t, m.WaitReady(ctx, 2*time.Minute))
	}
	caBundle := func() string {
		cfg, err := vwcs.Get(ctx, vwcName, metav1.GetOptions{})
		require.NoError(t, err)
		return string(cfg.Webhooks[0].ClientConfig.CABundle)
	}

	t.Run("helm upgrade while the replicas run keeps the injected CA bundle", func(t *testing.T) {
		before := caBundle()
		require.NotEmpty(t, before, "a replica is ready only once its CA is injected")
		w.values(t, "hysteresis-0.yaml")
		require.Contains(t, w.helm(t, upgrade), `Release "ome-quota-manager" has been upgraded.`)
		require.Equal(t, before, caBundle(), "helm's apply leaves the manager's caBundle alone")
		w.values(t, "install.yaml")
		w.helm(t, upgrade)
		require.Equal(t, before, caBundle())
	})

	// The API server calls the webhook on loopback: the chart's Service
	// has no endpoints without a kubelet.
	cfg, err := vwcs.Get(ctx, vwcName, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range cfg.Webhooks {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", ports[0], *cfg.Webhooks[i].ClientConfig.Service.Path)
		cfg.Webhooks[i].ClientConfig.Service = nil
		cfg.Webhooks[i].ClientConfig.URL = &url
	}
	_, err = vwcs.Update(ctx, cfg, metav1.UpdateOptions{})
	require.NoError(t, err)

	t.Run("the replicas fill the Secret the upgrade recreated and inject its CA", func(t *testing.T) {
		s, err := cluster.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, s.Data["ca.crt"])
		require.Equal(t, string(s.Data["ca.crt"]), caBundle())
	})

	t.Run("the guide's tree goes Ready and Materialized", func(t *testing.T) {
		testutil.Eventually(t, time.Minute, func() string {
			out, _, _ := testutil.RunKubectl(t, cluster, "", "get", "aq", "root", "-o", `jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.allocatable}{" "}{.highWaterMark}{"\n"}{end}`)
			if !strings.Contains(out, "nvidia.com/gpu a100 32 32") {
				return "root's capacity: " + out
			}
			return ""
		})
		out := testutil.MustKubectl(t, cluster, readSample(t, "quota-tree.yaml"), "apply", "-f", "-")
		require.Equal(t, "acceleratorquota.ome.io/ml-research created\nacceleratorquota.ome.io/team-alpha created\nacceleratorquota.ome.io/team-beta created", strings.TrimSpace(out))
		want := testutil.Normalize(`
NAME          ROLE           PARENT        READY   MATERIALIZED
ml-research   Cohort         root          True    True
root          Cohort         <none>        True    True
team-alpha    ClusterQueue   ml-research   True    True
team-beta     ClusterQueue   ml-research   True    True`)
		testutil.Eventually(t, time.Minute, func() string {
			out, _, _ := testutil.RunKubectl(t, cluster, "", "get", "aq", "-o", `custom-columns=NAME:.metadata.name,ROLE:.spec.role,PARENT:.spec.parentRef.name,READY:.status.conditions[?(@.type=="Ready")].status,MATERIALIZED:.status.conditions[?(@.type=="Materialized")].status`)
			if got := testutil.Normalize(out); got != want {
				return "the tree:\n" + got
			}
			return ""
		})
		out = testutil.MustKubectl(t, cluster, "", "get", "localqueues.kueue.x-k8s.io", "-n", "ml-serving", "-l", "ome.io/quota-managed-by=ome-quota-manager",
			"-o", "custom-columns=NAME:.metadata.name,CLUSTERQUEUE:.spec.clusterQueue")
		require.Equal(t, "NAME CLUSTERQUEUE\nteam-alpha team-alpha\nteam-beta team-beta", testutil.Normalize(out))
	})

	t.Run("the webhook denies team-alpha at 20", func(t *testing.T) {
		alpha20 := strings.Replace(readSample(t, "quota-tree.yaml"), `nominal: "16"`, `nominal: "20"`, 1)
		_, stderr, err := testutil.RunKubectl(t, cluster, alpha20, "apply", "-f", "-")
		require.Error(t, err)
		require.True(t, strings.HasSuffix(strings.TrimSpace(stderr), denialEnd), stderr)
	})

	t.Run("one identity per replica: the Lease, the verdicts, the log", func(t *testing.T) {
		lease, err := cluster.Kube.CoordinationV1().Leases(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, lease.Spec.HolderIdentity)
		require.Contains(t, []string{"replica-0", "replica-1"}, *lease.Spec.HolderIdentity, "the Lease's holder is a pod's name")
		// The API server calls replica-0: its log holds the verdicts, each
		// naming it, and its start marker.
		dir := localcluster.PodPath(logs, "replica-0", "/var/lib/ome-quota-manager/events")
		testutil.Eventually(t, 30*time.Second, func() string {
			out, err := exec.Command(cluster.ManagerBin, "replay", dir, "--node", "team-alpha", "--history").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "CREATE admitted by replica-0") || !strings.Contains(string(out), "UPDATE request denied by replica-0") {
				return fmt.Sprintf("replay --history: %v\n%s", err, out)
			}
			return ""
		})
	})

	t.Run("the first judged write creates the AdmissionLedger the chart's CRD serves", func(t *testing.T) {
		crd := testutil.MustKubectl(t, cluster, "", "get", "crd", "admissionledgers.ome.io", "-o", `jsonpath={.metadata.annotations.meta\.helm\.sh/release-name}`)
		require.Equal(t, "ome-quota-manager", crd, "the release owns the ledger's CRD")
		testutil.Eventually(t, time.Minute, func() string {
			if _, _, err := testutil.RunKubectl(t, cluster, "", "get", "admissionledgers", "ome-quota-manager"); err != nil {
				return "no AdmissionLedger ome-quota-manager yet"
			}
			return ""
		})
	})

	t.Run("admission answers a server dry run", func(t *testing.T) {
		out := testutil.MustKubectl(t, cluster, readSample(t, "quota-tree.yaml"), "apply", "-f", "-", "--dry-run=server")
		require.Equal(t, "acceleratorquota.ome.io/ml-research unchanged (server dry run)\n"+
			"acceleratorquota.ome.io/team-alpha unchanged (server dry run)\n"+
			"acceleratorquota.ome.io/team-beta unchanged (server dry run)", strings.TrimSpace(out))
	})

	t.Run("who may read and write the tree", func(t *testing.T) { usersAndRoles(ctx, t) })

	t.Run("the replicas' token is the ServiceAccount's, under RBAC", func(t *testing.T) {
		as := func(args ...string) (string, error) {
			out, err := exec.Command(filepath.Join(cluster.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
			return string(out), err
		}
		out, err := as("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		require.NoError(t, err, out)
		require.Equal(t, saUser, out)
		out, err = as("get", "secrets", "-n", ns)
		require.Error(t, err)
		require.Contains(t, out, `User "`+saUser+`" cannot list resource "secrets"`)
	})

	t.Run("the ServiceAccount's least privilege", func(t *testing.T) {
		tests := []struct {
			args []string
			want string
		}{
			{[]string{"delete", "acceleratorquotas"}, "no"},
			{[]string{"delete", "acceleratorquotas/root"}, "no"},
			{[]string{"update", "acceleratorquotas/root"}, "yes"},
			{[]string{"update", "acceleratorquotas/team-alpha"}, "no"},
			{[]string{"patch", "acceleratorquotas/team-alpha"}, "no"},
			{[]string{"update", "acceleratorquotas"}, "no"},
			{[]string{"patch", "acceleratorquotas/team-alpha", "--subresource=status"}, "yes"},
			{[]string{"get", "secrets/" + secret, "-n", ns}, "yes"},
			{[]string{"update", "secrets/" + secret, "-n", ns}, "yes"},
			{[]string{"delete", "secrets/" + secret, "-n", ns}, "no"},
			{[]string{"get", "secrets/another", "-n", ns}, "no"},
			{[]string{"update", "secrets/another", "-n", ns}, "no"},
			{[]string{"list", "secrets", "-n", ns}, "no"},
			{[]string{"create", "secrets", "-n", ns}, "no"},
			{[]string{"get", "secrets/" + secret, "-n", "kube-system"}, "no"},
			{[]string{"update", "validatingwebhookconfigurations/" + vwcName}, "yes"},
			{[]string{"update", "validatingwebhookconfigurations/another"}, "no"},
			{[]string{"delete", "validatingwebhookconfigurations/" + vwcName}, "no"},
			{[]string{"get", "admissionledgers/ome-quota-manager"}, "yes"},
			{[]string{"update", "admissionledgers/ome-quota-manager"}, "yes"},
			{[]string{"create", "admissionledgers"}, "yes"},
			{[]string{"get", "admissionledgers/another"}, "no"},
			{[]string{"update", "admissionledgers/another"}, "no"},
			{[]string{"list", "admissionledgers"}, "no"},
			{[]string{"watch", "admissionledgers/ome-quota-manager"}, "yes"},
			{[]string{"delete", "admissionledgers/ome-quota-manager"}, "no"},
			{[]string{"patch", "admissionledgers/ome-quota-manager"}, "no"},
			// No ConfigMap in its namespace.
			{[]string{"get", "configmaps/ome-quota-manager-admissions", "-n", ns}, "no"},
			{[]string{"create", "configmaps", "-n", ns}, "no"},
			{[]string{"get", "configmaps/another", "-n", ns}, "no"},
			{[]string{"update", "leases/ome-quota-manager", "-n", ns}, "yes"},
			{[]string{"update", "leases/another", "-n", ns}, "no"},
			{[]string{"patch", "nodes"}, "no"},
		}
		for _, tc := range tests {
			args := append([]string{"auth", "can-i"}, tc.args...)
			args = append(args, "--as="+saUser, "--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:"+ns)
			out, _, _ := testutil.RunKubectl(t, cluster, "", args...)
			require.Equal(t, tc.want, strings.TrimSpace(out), "kubectl auth can-i %s", strings.Join(tc.args, " "))
		}
		// The ledger's informer lists and watches it by name, which RBAC
		// checks as that name: no replica was refused.
		for _, m := range replicas {
			log, err := os.ReadFile(m.Log)
			require.NoError(t, err)
			for _, line := range strings.Split(string(log), "\n") {
				require.False(t, strings.Contains(line, "admissionledgers") && strings.Contains(line, "forbidden"), "%s: %s", m.Name, line)
			}
		}
	})

	// The guide's clean-up, while the quota manager runs: the teams, then
	// the Cohort; their Kueue objects are swept, the Cohort root stays.
	t.Run("the guide's clean-up: the teams, then the Cohort", func(t *testing.T) {
		out := testutil.MustKubectl(t, cluster, "", "delete", "aq", "team-alpha", "team-beta")
		require.Contains(t, out, `acceleratorquota.ome.io "team-alpha" deleted`)
		require.Contains(t, testutil.MustKubectl(t, cluster, "", "delete", "aq", "ml-research"), `acceleratorquota.ome.io "ml-research" deleted`)
		testutil.Eventually(t, 30*time.Second, func() string {
			var left []string
			for _, kind := range []string{"cohorts.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io"} {
				out, _, err := testutil.RunKubectl(t, cluster, "", "get", kind, "-A", "-l", "ome.io/quota-managed-by=ome-quota-manager", "-o", "name")
				if err != nil {
					return err.Error()
				}
				left = append(left, strings.Fields(out)...)
			}
			if !slices.Equal(left, []string{"cohort.kueue.x-k8s.io/root"}) {
				return fmt.Sprintf("managed Kueue objects left: %v, want the Cohort root alone", left)
			}
			return ""
		})
	})

	for _, m := range replicas {
		stopClean(t, m)
	}
}

// leftovers lists every object of the cluster that the product may have
// created: labelled ome.io/quota-managed-by, named after it, in the
// release's namespace (but for what every namespace holds), or of its API
// group. Events are left out: the API server removes them after its
// --event-ttl (1 h).
func leftovers(ctx context.Context, t *testing.T) []string {
	t.Helper()
	dc, err := dynamic.NewForConfig(cluster.Config)
	require.NoError(t, err)
	lists, err := cluster.Kube.Discovery().ServerPreferredResources()
	if len(lists) == 0 {
		require.NoError(t, err)
	}
	var out []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		require.NoError(t, err)
		for _, r := range l.APIResources {
			// APIServices are the API server's own, one per served group
			// version (v1beta1.ome.io stays with ome-crd's CRD).
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") || r.Name == "events" || r.Name == "apiservices" {
				continue
			}
			items, err := dc.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue // served by nothing now (a CRD being removed)
			}
			for _, o := range items.Items {
				name := o.GetName()
				ours := o.GetLabels()[v1beta1.ManagedByLabel] != "" || strings.Contains(name, "ome-quota-manager") ||
					gv.Group == v1beta1.GroupName || strings.HasSuffix(name, "."+v1beta1.GroupName)
				if o.GetNamespace() == ns && !(r.Kind == "ConfigMap" && name == "kube-root-ca.crt") && !(r.Kind == "ServiceAccount" && name == "default") {
					ours = true
				}
				// The AcceleratorQuota CRD is ome-crd's (crd.install: false).
				if ours && !(r.Kind == "Namespace" && name == ns) && !(r.Kind == "CustomResourceDefinition" && name == "acceleratorquotas."+v1beta1.GroupName) {
					out = append(out, fmt.Sprintf("%s %s/%s", r.Kind, o.GetNamespace(), name))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func readSample(t *testing.T, name string) string {
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "config", "samples", name))
	require.NoError(t, err)
	return string(data)
}

// usersAndRoles: the built-in view role reads AcceleratorQuotas (through the
// chart's aggregated ClusterRole); the guide's accelerator-quota-admin edits
// the tree but not its status.
func usersAndRoles(ctx context.Context, t *testing.T) {
	testutil.MustKubectl(t, cluster, "", "create", "clusterrolebinding", "alice-view", "--clusterrole=view", "--user=alice")
	_, stderr, err := testutil.RunKubectl(t, cluster, "", "--as=alice", "get", "aq")
	require.Error(t, err, "before aggregation, view grants nothing on AcceleratorQuotas")
	require.Contains(t, stderr, "forbidden")
	aggregate(ctx, t)
	out := testutil.MustKubectl(t, cluster, "", "--as=alice", "get", "aq", "-o", "name")
	require.Contains(t, out, "acceleratorquota.ome.io/team-beta")
	beta6 := strings.Replace(readSample(t, "quota-tree.yaml"), `nominal: "8"`, `nominal: "6"`, 1)
	_, stderr, err = testutil.RunKubectl(t, cluster, beta6, "--as=alice", "apply", "-f", "-")
	require.Error(t, err, "view reads, it does not write")
	require.Contains(t, stderr, `User "alice" cannot patch resource "acceleratorquotas"`)

	out = testutil.MustKubectl(t, cluster, guideAdminRole, "apply", "-f", "-")
	require.Equal(t, "clusterrole.rbac.authorization.k8s.io/accelerator-quota-admin created\n"+
		"clusterrolebinding.rbac.authorization.k8s.io/accelerator-quota-admin created", strings.TrimSpace(out))
	bob := []string{"--as=bob", "--as-group=quota-admins"}
	out = testutil.MustKubectl(t, cluster, beta6, append(bob, "apply", "-f", "-")...)
	require.Contains(t, out, "acceleratorquota.ome.io/team-beta configured")
	out = testutil.MustKubectl(t, cluster, readSample(t, "quota-tree.yaml"), append(bob, "apply", "-f", "-")...)
	require.Contains(t, out, "acceleratorquota.ome.io/team-beta configured")
	// kubectl patch --subresource=status reads the status first, which bob
	// may not either; send the patch itself as bob.
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "bob", Groups: []string{"quota-admins"}}
	dc, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = dc.Resource(v1beta1.AcceleratorQuotas).Patch(ctx, "team-beta", types.MergePatchType, []byte(`{"status":{"nominal":"1"}}`), metav1.PatchOptions{}, "status")
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Contains(t, err.Error(), `User "bob" cannot patch resource "acceleratorquotas/status" in API group "ome.io"`)
}

// The guide's "Let a group manage quotas".
const guideAdminRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: accelerator-quota-admin
rules:
  - apiGroups: ["ome.io"]
    resources: ["acceleratorquotas"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: accelerator-quota-admin
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: accelerator-quota-admin
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: quota-admins
`

// apiServerCIDRs returns the addresses of the kubernetes Endpoints as the
// chart turns them into ipBlocks.
func apiServerCIDRs(ctx context.Context, t *testing.T) []string {
	t.Helper()
	ep, err := cluster.Kube.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	var out []string
	for _, s := range ep.Subsets {
		for _, a := range s.Addresses {
			if strings.Contains(a.IP, ":") {
				out = append(out, a.IP+"/128")
			} else {
				out = append(out, a.IP+"/32")
			}
		}
	}
	return out
}

// webhookSources returns the CIDRs the installed NetworkPolicy admits to
// the webhook port; it fails when the port admits every source.
func webhookSources(ctx context.Context, t *testing.T) []string {
	t.Helper()
	np, err := cluster.Kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
	require.NoError(t, err)
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 1 && r.Ports[0].Port.IntValue() == 9443 {
			require.NotEmpty(t, r.From, "the webhook port admits every source")
			var out []string
			for _, p := range r.From {
				require.NotNil(t, p.IPBlock, "only ipBlocks reach the webhook port: %+v", p)
				out = append(out, p.IPBlock.CIDR)
			}
			return out
		}
	}
	t.Fatal("no rule for the webhook port")
	return nil
}

// TestManagementModeInstall installs the chart as a management plane with
// the built helm binary on the real API server, both ways: the member list
// in a ConfigMap that a helm upgrade changes without touching the pods,
// and ClusterProfiles with the grants they need. An install the chart
// refuses (no member, the old members key) leaves nothing behind. Then it
// installs the chart as a member with remoteAccess.
func TestManagementModeInstall(t *testing.T) {
	ctx := context.Background()
	w := newWorkdir(t)
	// What the product left before, and what an uninstall keeps: the
	// webhook's Secret.
	before := leftovers(ctx, t)
	kept := "Secret " + ns + "/" + secret
	added := func() []string {
		var out []string
		for _, o := range leftovers(ctx, t) {
			if !slices.Contains(before, o) && o != kept {
				out = append(out, o)
			}
		}
		return out
	}
	// gone: helm uninstall deletes and returns; an object with finalizers
	// (a CRD whose objects the API server is removing) goes a moment
	// later, and must then go.
	gone := func(t *testing.T) {
		t.Helper()
		testutil.Eventually(t, time.Minute, func() string {
			if left := added(); len(left) > 0 {
				return fmt.Sprintf("left after helm uninstall: %v", left)
			}
			return ""
		})
	}
	t.Cleanup(func() {
		if !slices.Contains(before, kept) {
			_, _, _ = testutil.RunKubectl(t, cluster, "", "delete", "secret", "-n", ns, secret, "--ignore-not-found")
		}
	})
	refused := func(t *testing.T, line, want string) {
		t.Helper()
		out := w.helmFails(t, line)
		require.Contains(t, out, want)
		_, err := cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "a refused install left a Deployment: %v", err)
		require.Empty(t, added(), "a refused install left objects")
		_, err = w.run(t, "helm status ome-quota-manager -n ome")
		require.Error(t, err, "a refused install left a release")
	}
	t.Run("refused installs leave nothing", func(t *testing.T) {
		refused(t, "helm install ome-quota-manager ./charts/ome-quota-manager --namespace ome --set quotaManager.mode=management",
			"quotaManager.mode is management but no member cluster is given")
		refused(t, "helm install ome-quota-manager ./charts/ome-quota-manager --namespace ome --set quotaManager.mode=management --set quotaManager.projection.members[0].name=east --set quotaManager.projection.members[0].secretName=east-kubeconfig",
			"quotaManager.projection.members was renamed quotaManager.projection.clusters")
	})

	as := func(args ...string) string {
		args = append([]string{"auth", "can-i"}, args...)
		args = append(args, "--as="+saUser, "--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:"+ns)
		out, _, _ := testutil.RunKubectl(t, cluster, "", args...)
		return strings.TrimSpace(out)
	}

	t.Run("kubeconfig Secrets: the members' ConfigMap changes, the pods do not", func(t *testing.T) {
		w.values(t, "plane-clusters.yaml")
		out := w.helm(t, installServerSide)
		require.Contains(t, out, "STATUS: deployed")
		require.Contains(t, out, "Its 2 member cluster(s), from ConfigMap ome-quota-manager-members:")
		require.NotContains(t, out, "No namespace is enrolled", "a plane enrolls none")
		t.Cleanup(func() { _, _ = w.run(t, uninstall) })
		allAccepted(t, w)
		d := getDeployment(ctx, t)
		args := d.Spec.Template.Spec.Containers[0].Args
		for _, want := range []string{"--mode=management", "--origin=fleet-1", "--members-from=secrets",
			"--members-configmap=ome-quota-manager-members", "--members-namespace=ome", "--webhook=true"} {
			require.Contains(t, args, want)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			require.Nil(t, v.Secret, "no Secret is mounted: %s", v.Name)
		}
		cm, err := cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "ome-quota-manager-members", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"east": "east-kubeconfig", "west": "west-kubeconfig/config"}, cm.Data)
		for args, want := range map[string]string{
			"list configmaps/ome-quota-manager-members": "yes", "watch configmaps/ome-quota-manager-members": "yes",
			"get configmaps/another": "no", "list configmaps": "no", "update configmaps/ome-quota-manager-members": "no",
			"watch secrets/east-kubeconfig": "yes", "list secrets/west-kubeconfig": "yes",
			"list secrets": "no", "watch secrets/another": "no", "update secrets/east-kubeconfig": "no",
			// The copies finalizer on the fleet's teams; never a deletion.
			"update acceleratorquotas/fleet-a": "yes", "delete acceleratorquotas/fleet-a": "no",
		} {
			require.Equal(t, want, as(append(strings.Fields(args), "-n", ns)...), "kubectl auth can-i %s", args)
		}

		// Drop west: the ConfigMap and the grants follow, the Deployment's
		// spec does not (its generation stays), so no pod restarts.
		require.NoError(t, os.WriteFile(filepath.Join(w.dir, "quota-values.yaml"), []byte(`global:
  hub: registry.example.com/ome
quotaManager:
  mode: management
  image:
    tag: dev
  projection:
    origin: fleet-1
    clusters:
      - name: east
        secretName: east-kubeconfig
`), 0o644))
		require.Contains(t, w.helm(t, upgrade), `Release "ome-quota-manager" has been upgraded.`)
		cm, err = cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "ome-quota-manager-members", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"east": "east-kubeconfig"}, cm.Data)
		require.Equal(t, d.Generation, getDeployment(ctx, t).Generation, "the upgrade changed the Deployment's spec")
		require.Equal(t, "no", as("watch", "secrets/west-kubeconfig", "-n", ns))
		w.helm(t, uninstall)
		gone(t)
	})

	t.Run("ClusterProfiles: the providers file and the grants", func(t *testing.T) {
		installClusterProfileCRD(t)
		w.values(t, "plane-clusterprofiles.yaml")
		out := w.helm(t, installServerSide)
		require.Contains(t, out, "STATUS: deployed")
		require.Contains(t, out, `Its members are the ClusterProfiles of namespace ome that match "fleet=gpu",`)
		require.NotContains(t, out, "No namespace is enrolled", "a plane enrolls none")
		t.Cleanup(func() { _, _ = w.run(t, uninstall) })
		allAccepted(t, w)
		d := getDeployment(ctx, t)
		args := d.Spec.Template.Spec.Containers[0].Args
		for _, want := range []string{"--mode=management", "--members-from=clusterprofiles", "--clusterprofile-namespace=ome",
			"--clusterprofile-selector=fleet=gpu", "--clusterprofile-provider-file=/etc/ome-quota-manager/clusterprofiles/providers.json"} {
			require.Contains(t, args, want)
		}
		cm, err := cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "ome-quota-manager-clusterprofile-providers", metav1.GetOptions{})
		require.NoError(t, err)
		require.Contains(t, cm.Data["providers.json"], `"command": "/secretreader-plugin"`)
		for args, want := range map[string]string{
			"list clusterprofiles.multicluster.x-k8s.io": "yes", "watch clusterprofiles.multicluster.x-k8s.io": "yes",
			"update clusterprofiles.multicluster.x-k8s.io": "no", "list clusterprofiles.multicluster.x-k8s.io -n default": "no",
			"get secrets/east": "yes", "list secrets": "no", "watch secrets": "no", "update secrets/east": "no",
			"get secrets/east -n default": "no", "list configmaps": "no",
		} {
			fields := strings.Fields(args)
			if !slices.Contains(fields, "-n") {
				fields = append(fields, "-n", ns)
			}
			require.Equal(t, want, as(fields...), "kubectl auth can-i %s", args)
		}
		w.helm(t, uninstall)
		gone(t)
	})

	// On a member: remoteAccess creates the plane's identity, and the
	// webhook lets it alone change the copies.
	t.Run("a member with remoteAccess", func(t *testing.T) {
		w.values(t, "install.yaml")
		out := w.helm(t, "helm install ome-quota-manager ./charts/ome-quota-manager --namespace ome -f quota-values.yaml --set quotaManager.remoteAccess.enabled=true")
		require.Contains(t, out, "kubectl -n ome create token ome-quota-manager-remote-access --duration=720h")
		const remote = "ome-quota-manager-remote-access"
		_, err := cluster.Kube.RbacV1().ClusterRoles().Get(ctx, remote, metav1.GetOptions{})
		require.NoError(t, err)
		_, err = cluster.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, remote, metav1.GetOptions{})
		require.NoError(t, err)
		_, err = cluster.Kube.CoreV1().Secrets(ns).Get(ctx, remote+"-token", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no legacy token Secret by default: %v", err)
		require.Contains(t, getDeployment(ctx, t).Spec.Template.Spec.Containers[0].Args, "--webhook-projection-writers=system:serviceaccount:ome:"+remote)
		w.helm(t, uninstall)
		_, err = cluster.Kube.RbacV1().ClusterRoles().Get(ctx, remote, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "uninstall left the remote-access ClusterRole: %v", err)
	})
}

// installClusterProfileCRD installs SIG-Multicluster's ClusterProfile CRD
// from the module go.mod requires, as docs/install.md does, for the test.
func installClusterProfileCRD(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api").Output()
	require.NoError(t, err)
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")
	testutil.MustKubectl(t, cluster, "", "apply", "--server-side", "-f", crd)
	testutil.MustKubectl(t, cluster, "", "wait", "--for=condition=Established", "crd/clusterprofiles.multicluster.x-k8s.io", "--timeout=60s")
	t.Cleanup(func() { _, _, _ = testutil.RunKubectl(t, cluster, "", "delete", "-f", crd, "--ignore-not-found") })
}
