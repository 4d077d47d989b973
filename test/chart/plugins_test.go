package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"ome.io/quota-manager/test/localcluster"
)

// docExample is the values block of docs/install.md's Credential plugins
// whose first line is "# plugins-example: NAME".
func docExample(t *testing.T, name string) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?ms)^```yaml\n# plugins-example: " + name + "\n(.*?)^```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/install.md has no plugins-example: %s block", name)
	return string(m[1])
}

// pluginFile is the providers file the release renders, as the manager
// reads it.
func pluginFile(t *testing.T, r *Rendered) *credentials.CredentialsProvider {
	t.Helper()
	cm := convert[corev1.ConfigMap](t, r.Get("ConfigMap", "ome-quota-manager-clusterprofile-providers"))
	file := filepath.Join(t.TempDir(), "providers.json")
	require.NoError(t, os.WriteFile(file, []byte(cm.Data["providers.json"]), 0o600))
	creds, err := credentials.NewFromFile(file)
	require.NoError(t, err)
	return creds
}

// TestCredentialPlugins: docs/install.md's examples, OCM's cp-creds and
// GKE's gcp-auth-plugin, each put an init container in the plane's pod
// that copies the plugin into the shared emptyDir at /plugins, with that
// mount and the manager's securityContext; the manager mounts /plugins
// read-only; the providers file, as the manager reads it, runs the plugin
// from there. Extra volumes and mounts join the chart's own; an init
// container's own securityContext is kept; an image volume at /plugins
// needs no init container; without plugins, the pod has none of it.
func TestCredentialPlugins(t *testing.T) {
	manager := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	for name, want := range map[string]struct {
		image, provider, apiVersion, command string
		copy                                 []string
		args                                 []string
	}{
		"ocm": {"quay.io/open-cluster-management/cp-creds:latest", "open-cluster-management", "client.authentication.k8s.io/v1", "/plugins/cp-creds",
			[]string{"cp", "/cp-creds", "/plugins/cp-creds"}, []string{"--managed-serviceaccount=ome-quota-manager"}},
		"gke": {"registry.example.com/ome/gcp-auth-plugin:v0.0.1", "google", "client.authentication.k8s.io/v1beta1", "/plugins/gcp-auth-plugin",
			[]string{"cp", "/gcp-auth-plugin", "/plugins/gcp-auth-plugin"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			values := docExample(t, name)
			r := renderValues(t, planeProfiles, values)
			pod := deployment(t, r).Spec.Template.Spec
			require.Len(t, pod.InitContainers, 1)
			init := pod.InitContainers[0]
			require.Equal(t, want.image, init.Image)
			require.Equal(t, want.copy, init.Command)
			require.Equal(t, []corev1.VolumeMount{{Name: "credential-plugins", MountPath: "/plugins"}}, init.VolumeMounts)
			require.Equal(t, manager, init.SecurityContext, "the manager's own")
			ms, vs := mounts(pod)
			require.Equal(t, corev1.VolumeMount{Name: "credential-plugins", MountPath: "/plugins", ReadOnly: true}, ms["credential-plugins"])
			require.NotNil(t, vs["credential-plugins"].EmptyDir)
			require.Equal(t, "/etc/ome-quota-manager/clusterprofiles", ms["clusterprofile-providers"].MountPath, "the chart's own mounts stay")

			creds := pluginFile(t, r)
			require.Len(t, creds.Providers, 1)
			p := creds.Providers[0]
			require.Equal(t, want.provider, p.Name)
			require.Equal(t, want.apiVersion, p.ExecConfig.APIVersion)
			require.Equal(t, want.command, p.ExecConfig.Command)
			require.Equal(t, want.args, p.ExecConfig.Args)
			require.Equal(t, want.command, init.Command[len(init.Command)-1], "the provider runs the file its init container copies")

			lint, err := Lint([]string{planeProfiles[0], writeValues(t, values)})
			require.NoError(t, err)
			require.Empty(t, lint, "helm lint --strict")
		})
	}

	// Extra volumes and mounts, and an init container's own
	// securityContext.
	r := renderValues(t, planeProfiles, docExample(t, "ocm")+`
        volumes:
          - name: gcp-credentials
            secret:
              secretName: gcp-credentials
        volumeMounts:
          - name: gcp-credentials
            mountPath: /etc/gcp
            readOnly: true
`)
	ms, vs := mounts(deployment(t, r).Spec.Template.Spec)
	require.Equal(t, corev1.VolumeMount{Name: "gcp-credentials", MountPath: "/etc/gcp", ReadOnly: true}, ms["gcp-credentials"])
	require.Equal(t, "gcp-credentials", vs["gcp-credentials"].Secret.SecretName)
	require.Contains(t, ms, "credential-plugins")
	own := renderValues(t, planeProfiles, docExample(t, "ocm")+`
          - name: other
            image: example.com/other
            command: ["cp", "/other", "/plugins/other"]
            securityContext:
              runAsUser: 65532
`)
	inits := deployment(t, own).Spec.Template.Spec.InitContainers
	require.Len(t, inits, 2)
	require.Equal(t, manager, inits[0].SecurityContext)
	require.Equal(t, &corev1.SecurityContext{RunAsUser: ptr.To[int64](65532)}, inits[1].SecurityContext)
	require.Equal(t, []corev1.VolumeMount{{Name: "credential-plugins", MountPath: "/plugins"}}, inits[1].VolumeMounts)

	// An image volume at /plugins, without an init container, is the
	// operator's own.
	image := renderValues(t, planeProfiles, `
quotaManager:
  projection:
    clusterProfiles:
      plugins:
        volumes:
          - name: cp-creds
            image:
              reference: quay.io/open-cluster-management/cp-creds:latest
              pullPolicy: IfNotPresent
        volumeMounts:
          - name: cp-creds
            mountPath: /plugins
`)
	pod := deployment(t, image).Spec.Template.Spec
	require.Empty(t, pod.InitContainers)
	ms, vs = mounts(pod)
	require.Equal(t, "/plugins", ms["cp-creds"].MountPath)
	require.Equal(t, "quay.io/open-cluster-management/cp-creds:latest", vs["cp-creds"].Image.Reference)
	require.NotContains(t, vs, "credential-plugins")

	plain := deployment(t, render(t, planeProfiles)).Spec.Template.Spec
	require.Empty(t, plain.InitContainers)
	ms, vs = mounts(plain)
	require.NotContains(t, ms, "credential-plugins")
	require.NotContains(t, vs, "credential-plugins")
}

func writeValues(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(path, []byte(values), 0o600))
	return path
}

// TestInsecureKubeconfigs: projection.allowInsecureKubeconfigs becomes the
// manager's flag with kubeconfig Secrets, and is off by default.
func TestInsecureKubeconfigs(t *testing.T) {
	o, _ := flags(t, deployment(t, render(t, planeClusters)).Spec.Template.Spec.Containers[0].Args)
	require.False(t, o.MembersAllowInsecureKubeconfigs)
	r := render(t, planeClusters, "quotaManager.projection.allowInsecureKubeconfigs=true")
	args := deployment(t, r).Spec.Template.Spec.Containers[0].Args
	require.Contains(t, args, "--members-allow-insecure-kubeconfigs=true")
	o, _ = flags(t, args)
	require.True(t, o.MembersAllowInsecureKubeconfigs)
}

// TestPluginsRefused: plugins and insecure kubeconfigs where they mean
// nothing, and plugin volumes that take the chart's names or paths, fail
// the render, saying what to do.
func TestPluginsRefused(t *testing.T) {
	initContainer := []string{"quotaManager.projection.clusterProfiles.plugins.initContainers[0].name=cp-creds",
		"quotaManager.projection.clusterProfiles.plugins.initContainers[0].image=example.com/cp-creds"}
	for name, tc := range map[string]struct {
		files []string
		set   []string
		want  string
	}{
		"plugins with kubeconfig Secrets": {planeClusters, initContainer,
			"quotaManager.projection.clusterProfiles.plugins.initContainers is set but quotaManager.projection.clusterProfiles.enabled is false: set it to true to read the members from ClusterProfiles, or drop it"},
		"plugins in workload mode": {install, initContainer,
			"quotaManager.projection.clusterProfiles.plugins.initContainers is set but quotaManager.mode is workload"},
		"insecure kubeconfigs with profiles": {planeProfiles, []string{"quotaManager.projection.allowInsecureKubeconfigs=true"},
			"quotaManager.projection.allowInsecureKubeconfigs is set but the members are ClusterProfiles, which the plane reaches without a kubeconfig: drop it (it is for kubeconfig Secrets of test clusters, under quotaManager.projection.clusters)"},
		"insecure kubeconfigs in workload mode": {install, []string{"quotaManager.projection.allowInsecureKubeconfigs=true"},
			"quotaManager.projection.allowInsecureKubeconfigs is set but quotaManager.mode is workload"},
		"a volume of the chart's name": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.plugins.volumes[0].name=clusterprofile-providers"},
			"quotaManager.projection.clusterProfiles.plugins.volumes names a volume clusterprofile-providers, which the chart uses itself: name it otherwise"},
		"a mount at the chart's path": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.plugins.volumeMounts[0].name=x",
			"quotaManager.projection.clusterProfiles.plugins.volumeMounts[0].mountPath=/etc/ome-quota-manager/clusterprofiles/"},
			"quotaManager.projection.clusterProfiles.plugins.volumeMounts mounts x at /etc/ome-quota-manager/clusterprofiles/, where the chart mounts a volume of its own: mount it elsewhere (with initContainers, plugins are copied to /plugins)"},
		"a mount at /plugins beside init containers": {planeProfiles, append(initContainer, "quotaManager.projection.clusterProfiles.plugins.volumeMounts[0].name=x",
			"quotaManager.projection.clusterProfiles.plugins.volumeMounts[0].mountPath=/plugins"),
			"quotaManager.projection.clusterProfiles.plugins.volumeMounts mounts x at /plugins, where the chart mounts a volume of its own"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render("ome", tc.files, tc.set...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := Render("ome", planeProfiles, "quotaManager.projection.clusterProfiles.plugins.initContainers[0].name=cp-creds")
	require.ErrorContains(t, err, "values don't meet the specifications of the schema")
	require.ErrorContains(t, err, "/quotaManager/projection/clusterProfiles/plugins/initContainers/0")
}
