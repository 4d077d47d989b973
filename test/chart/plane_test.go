package chart

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/manager/plane"
)

// A management plane's values, one file per way of listing its members.
var (
	planeClusters = []string{"testdata/plane-clusters.yaml"}
	planeProfiles = []string{"testdata/plane-clusterprofiles.yaml"}
)

// mounts returns the container's mounts and the pod's volumes by name.
func mounts(pod corev1.PodSpec) (map[string]corev1.VolumeMount, map[string]corev1.Volume) {
	ms, vs := map[string]corev1.VolumeMount{}, map[string]corev1.Volume{}
	for _, m := range pod.Containers[0].VolumeMounts {
		ms[m.Name] = m
	}
	for _, v := range pod.Volumes {
		vs[v.Name] = v
	}
	return ms, vs
}

// memberArgs returns the args that say where the plane's members are.
func memberArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--members-") || strings.HasPrefix(a, "--clusterprofile-") || strings.HasPrefix(a, "--origin") || strings.HasPrefix(a, "--mode") {
			out = append(out, a)
		}
	}
	return out
}

// TestPlaneFromKubeconfigSecrets: projection.clusters becomes the ConfigMap
// the plane watches (--members-from=secrets), each entry one the manager
// parses; the plane may read that ConfigMap and those Secrets by name and
// nothing else of the namespace; no Secret is mounted, and the pods'
// template does not change with the list, so that a helm upgrade that adds
// or drops a cluster does not restart the plane.
func TestPlaneFromKubeconfigSecrets(t *testing.T) {
	r := render(t, planeClusters)
	d := deployment(t, r)
	pod := d.Spec.Template.Spec
	require.Equal(t, []string{"--mode=management", "--members-from=secrets", "--members-configmap=ome-quota-manager-members",
		"--members-namespace=ome", "--origin=fleet-1"}, memberArgs(pod.Containers[0].Args))
	o, w := flags(t, pod.Containers[0].Args)
	require.Equal(t, manager.MembersFromSecrets, o.MembersFrom)
	require.Equal(t, "ome-quota-manager-members", o.MembersConfigMap)
	require.Equal(t, "ome", o.MembersNamespace)
	require.Equal(t, "fleet-1", o.Origin)
	require.True(t, w.Enabled, "a plane's webhook is on by default")
	require.Equal(t, int32(2), *d.Spec.Replicas)

	cm := convert[corev1.ConfigMap](t, r.Get("ConfigMap", "ome-quota-manager-members"))
	require.Equal(t, "ome", cm.Namespace)
	require.Equal(t, map[string]string{"east": "east-kubeconfig", "west": "west-kubeconfig/config"}, cm.Data)
	parsed := map[string]string{}
	for name, v := range cm.Data {
		secret, key, err := plane.ParseMemberEntry(name, v)
		require.NoError(t, err)
		parsed[name] = secret + " " + key
	}
	require.Equal(t, map[string]string{"east": "east-kubeconfig kubeconfig", "west": "west-kubeconfig config"}, parsed)

	ms, vs := mounts(pod)
	require.Equal(t, []string{"event-log"}, keys(ms), "no member Secret is mounted: the plane watches them")
	require.Equal(t, []string{"event-log"}, keys(vs))
	require.Nil(t, r.Get("ConfigMap", "ome-quota-manager-clusterprofile-providers"))
	require.Nil(t, r.Get("Role", "ome-quota-manager-clusterprofiles"))

	role := convert[rbacv1.Role](t, r.Get("Role", "ome-quota-manager"))
	require.Equal(t, []string{
		"coordination.k8s.io leases: create",
		"coordination.k8s.io leases/ome-quota-manager: get,update",
		" secrets/ome-quota-manager-webhook-cert: get,list,watch,update",
		"networking.k8s.io networkpolicies/ome-quota-manager: get",
		" configmaps/ome-quota-manager-members: list,watch",
		" secrets/east-kubeconfig,west-kubeconfig: list,watch",
	}, rules(role.Rules))

	// The member list changes nothing of the pods: no restart when a
	// cluster is dropped or added.
	one := renderValues(t, planeClusters, `
quotaManager:
  projection:
    clusters:
      - name: east
        secretName: east-kubeconfig
`)
	require.Equal(t, map[string]string{"east": "east-kubeconfig"}, convert[corev1.ConfigMap](t, one.Get("ConfigMap", "ome-quota-manager-members")).Data)
	require.Empty(t, cmp.Diff(d.Spec.Template, deployment(t, one).Spec.Template), "dropping a cluster changes the pods' template (-two +one)")
	require.Equal(t, []string{
		"coordination.k8s.io leases: create",
		"coordination.k8s.io leases/ome-quota-manager: get,update",
		" secrets/ome-quota-manager-webhook-cert: get,list,watch,update",
		"networking.k8s.io networkpolicies/ome-quota-manager: get",
		" configmaps/ome-quota-manager-members: list,watch",
		" secrets/east-kubeconfig: list,watch",
	}, rules(convert[rbacv1.Role](t, one.Get("Role", "ome-quota-manager")).Rules))

	// Two members may share a Secret (under different keys): it is granted once.
	shared := render(t, planeClusters, "quotaManager.projection.clusters[1].secretName=east-kubeconfig")
	require.Contains(t, rules(convert[rbacv1.Role](t, shared.Get("Role", "ome-quota-manager")).Rules), " secrets/east-kubeconfig: list,watch")
	require.Equal(t, map[string]string{"east": "east-kubeconfig", "west": "east-kubeconfig/config"},
		convert[corev1.ConfigMap](t, shared.Get("ConfigMap", "ome-quota-manager-members")).Data)

	lint, err := Lint(planeClusters)
	require.NoError(t, err)
	require.Empty(t, lint, "helm lint --strict")
}

// renderValues renders with files and then a values file holding values.
func renderValues(t *testing.T, files []string, values string) *Rendered {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(path, []byte(values), 0o600))
	return render(t, append(slices.Clone(files), path))
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// TestPlaneFromClusterProfiles: projection.clusterProfiles becomes
// --members-from=clusterprofiles with the namespace and selector, and the
// providers file, which the manager's credentials package reads, mounted
// read-only from a ConfigMap whose checksum rolls the pods. The plane may
// list and watch the profiles of their namespace, and get the members'
// token Secrets of its own while the secret-reader provider is listed.
func TestPlaneFromClusterProfiles(t *testing.T) {
	r := render(t, planeProfiles)
	d := deployment(t, r)
	pod := d.Spec.Template.Spec
	require.Equal(t, []string{"--mode=management", "--members-from=clusterprofiles", "--clusterprofile-namespace=ome",
		"--clusterprofile-selector=fleet=gpu", "--clusterprofile-provider-file=/etc/ome-quota-manager/clusterprofiles/providers.json"},
		memberArgs(pod.Containers[0].Args))
	o, w := flags(t, pod.Containers[0].Args)
	require.Equal(t, manager.MembersFromClusterProfiles, o.MembersFrom)
	require.Equal(t, "ome", o.ClusterProfileNamespace)
	require.Equal(t, "fleet=gpu", o.ClusterProfileSelector)
	require.True(t, w.Enabled, "a plane's webhook is on by default")
	require.Equal(t, int32(2), *d.Spec.Replicas)

	// The file, as the manager reads it.
	cm := convert[corev1.ConfigMap](t, r.Get("ConfigMap", "ome-quota-manager-clusterprofile-providers"))
	require.Equal(t, "ome", cm.Namespace)
	ms, vs := mounts(pod)
	require.Equal(t, "/etc/ome-quota-manager/clusterprofiles", ms["clusterprofile-providers"].MountPath)
	require.True(t, ms["clusterprofile-providers"].ReadOnly)
	require.Equal(t, cm.Name, vs["clusterprofile-providers"].ConfigMap.Name)
	file := filepath.Join(t.TempDir(), "providers.json")
	require.NoError(t, os.WriteFile(file, []byte(cm.Data["providers.json"]), 0o600))
	require.Equal(t, "/etc/ome-quota-manager/clusterprofiles/providers.json", o.ClusterProfileProviders)
	creds, err := credentials.NewFromFile(file)
	require.NoError(t, err)
	require.Len(t, creds.Providers, 1)
	p := creds.Providers[0]
	require.Equal(t, "secretreader", p.Name)
	require.Equal(t, "/secretreader-plugin", p.ExecConfig.Command, "the image's plugin")
	require.Equal(t, "client.authentication.k8s.io/v1", p.ExecConfig.APIVersion)
	require.True(t, p.ExecConfig.ProvideClusterInfo, "the plugin reads the cluster's name from the profile")
	require.Nil(t, r.Get("ConfigMap", "ome-quota-manager-members"))

	profiles := convert[rbacv1.Role](t, r.Get("Role", "ome-quota-manager-clusterprofiles"))
	require.Equal(t, "ome", profiles.Namespace)
	require.Equal(t, []string{"multicluster.x-k8s.io clusterprofiles: list,watch"}, rules(profiles.Rules))
	rb := convert[rbacv1.RoleBinding](t, r.Get("RoleBinding", "ome-quota-manager-clusterprofiles"))
	require.Equal(t, "ome", rb.Namespace)
	require.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "ome-quota-manager-clusterprofiles"}, rb.RoleRef)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ome-quota-manager", Namespace: "ome"}}, rb.Subjects)
	base := []string{
		"coordination.k8s.io leases: create",
		"coordination.k8s.io leases/ome-quota-manager: get,update",
		" secrets/ome-quota-manager-webhook-cert: get,list,watch,update",
		"networking.k8s.io networkpolicies/ome-quota-manager: get",
	}
	require.Equal(t, append(base, " secrets: get"), rules(convert[rbacv1.Role](t, r.Get("Role", "ome-quota-manager")).Rules),
		"the secret-reader plugin gets the Secret named after each cluster, which may join later")

	// Profiles elsewhere: the Role goes to their namespace; the tokens
	// stay in the release's, and may be pinned to names.
	other := render(t, planeProfiles, "quotaManager.projection.clusterProfiles.namespace=fleet-system",
		"quotaManager.projection.clusterProfiles.tokenSecrets={east,west}")
	require.Contains(t, deployment(t, other).Spec.Template.Spec.Containers[0].Args, "--clusterprofile-namespace=fleet-system")
	require.Equal(t, "fleet-system", other.Get("Role", "ome-quota-manager-clusterprofiles").GetNamespace())
	require.Equal(t, "fleet-system", other.Get("RoleBinding", "ome-quota-manager-clusterprofiles").GetNamespace())
	require.Equal(t, append(base, " secrets/east,west: get"), rules(convert[rbacv1.Role](t, other.Get("Role", "ome-quota-manager")).Rules))

	// Every profile of the namespace: no selector flag.
	all := render(t, planeProfiles, "quotaManager.projection.clusterProfiles.selector=")
	o, _ = flags(t, deployment(t, all).Spec.Template.Spec.Containers[0].Args)
	require.Empty(t, o.ClusterProfileSelector, "an empty selector picks every profile")

	// Another provider: no Secret is read, and the pods roll with the file.
	custom := renderValues(t, planeProfiles, `
quotaManager:
  projection:
    clusterProfiles:
      providers:
        - name: gke
          execConfig:
            apiVersion: client.authentication.k8s.io/v1beta1
            command: /usr/bin/gke-gcloud-auth-plugin
`)
	require.Equal(t, base, rules(convert[rbacv1.Role](t, custom.Get("Role", "ome-quota-manager")).Rules))
	sum := func(r *Rendered) string {
		return deployment(t, r).Spec.Template.Annotations["checksum/clusterprofile-providers"]
	}
	require.NotEmpty(t, sum(r))
	require.NotEqual(t, sum(r), sum(custom), "a new providers file rolls the pods: it is read at start")
	require.Equal(t, sum(r), sum(other), "the namespace and selector are flags: the template changes with them anyway")

	lint, err := Lint(planeProfiles)
	require.NoError(t, err)
	require.Empty(t, lint, "helm lint --strict")
}

// TestPlaneSelector: the chart accepts a selector exactly when the
// manager's parser does (labels.Parse), for the forms kubectl -l takes.
func TestPlaneSelector(t *testing.T) {
	for _, sel := range []string{
		"fleet=gpu", "fleet==gpu", "fleet!=gpu", "fleet", "!fleet", "fleet in (gpu,tpu)", "fleet notin (gpu)",
		"example.com/fleet=gpu,tier=1", " fleet = gpu , ! retired ", "size>3", "size<10", "fleet=", "fleet in (gpu, tpu),!retired",
		"fleet in ()", "fleet in (gpu,)", "in", "x in(a)",
		"fleet=gpu=", "fleet in gpu", "=gpu", "fleet in (a b)", "fleet gpu", "!fleet=gpu", "fleet=g p u", "fleet=(gpu)", "fleet,", ",fleet",
		"size>three", "Fleet_1=x", "-fleet=x",
	} {
		t.Run(sel, func(t *testing.T) {
			_, perr := labels.Parse(sel)
			_, err := Render("ome", planeProfiles, "quotaManager.projection.clusterProfiles.selector="+strings.ReplaceAll(sel, ",", `\,`))
			if perr == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "labels.Parse refuses it: %v", perr)
			require.Contains(t, err.Error(), "quotaManager.projection.clusterProfiles.selector=")
			require.Contains(t, err.Error(), "is not a label selector")
		})
	}
}

// TestProjectionRefused: every way a projection can be wrong fails the
// render, with what is wrong and what to do.
func TestProjectionRefused(t *testing.T) {
	clusters := []string{"quotaManager.projection.clusters[0].name=east", "quotaManager.projection.clusters[0].secretName=east-kubeconfig"}
	plane := []string{"quotaManager.mode=management", "quotaManager.materialize.enrolledNamespaces=null"}
	tests := map[string]struct {
		files []string
		set   []string
		want  string
	}{
		"the old members key": {planeClusters, []string{"quotaManager.projection.members[0].name=east", "quotaManager.projection.members[0].secretName=east-kubeconfig"},
			"quotaManager.projection.members was renamed quotaManager.projection.clusters (the same entries: name, secretName, key): rename it in your values"},
		"the old members key in workload mode": {install, []string{"quotaManager.projection.members[0].name=east"},
			"quotaManager.projection.members was renamed quotaManager.projection.clusters"},
		"a plane without members": {install, plane,
			"quotaManager.mode is management but no member cluster is given: set quotaManager.projection.clusterProfiles.enabled=true (the members are ClusterProfiles) or list quotaManager.projection.clusters (each a name and the Secret of its kubeconfig); docs/install.md, Connecting a plane and its members"},
		"both ways": {planeProfiles, clusters,
			"quotaManager.projection.clusterProfiles.enabled is true and quotaManager.projection.clusters is set: a plane reads its members one way; keep the ClusterProfiles or the list of kubeconfig Secrets"},
		"clusters in workload mode": {install, clusters,
			"quotaManager.projection.clusters is set but quotaManager.mode is workload: only a management plane has member clusters, and a cluster runs one mode; drop it from this release (a plane's members are listed in the plane's own release)"},
		"profiles in workload mode": {install, []string{"quotaManager.projection.clusterProfiles.enabled=true", "quotaManager.projection.clusterProfiles.selector=fleet=gpu"},
			"quotaManager.projection.clusterProfiles.enabled, quotaManager.projection.clusterProfiles.selector are set but quotaManager.mode is workload: only a management plane has member clusters, and a cluster runs one mode; drop them from this release"},
		"an origin in workload mode": {install, []string{"quotaManager.projection.origin=fleet-1"},
			"quotaManager.projection.origin is set but quotaManager.mode is workload"},
		"enrolled namespaces on a plane": {planeClusters, []string{"quotaManager.materialize.enrolledNamespaces={ml-serving}"},
			"quotaManager.materialize.enrolledNamespaces is set but quotaManager.mode is management: a plane writes no Kueue objects of its own (each member's install enrolls its namespaces)"},
		"a selector without clusterProfiles": {planeClusters, []string{"quotaManager.projection.clusterProfiles.selector=fleet=gpu"},
			"quotaManager.projection.clusterProfiles.selector is set but quotaManager.projection.clusterProfiles.enabled is false: set it to true to read the members from ClusterProfiles, or drop it"},
		"a cluster twice": {planeClusters, []string{"quotaManager.projection.clusters[1].name=east"},
			"quotaManager.projection.clusters lists east twice: each member once, with the Secret of its kubeconfig"},
		"no providers": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.providers=null"},
			"quotaManager.projection.clusterProfiles.providers is empty: list the credential providers that reach the profiles' access providers (the default runs the image's secret-reader plugin)"},
		"a selector that is not one": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.selector=fleet in gpu"},
			`quotaManager.projection.clusterProfiles.selector="fleet in gpu" is not a label selector: write it as kubectl -l takes it, e.g. fleet=gpu or "fleet in (gpu,tpu),!retired"; empty picks every ClusterProfile of the namespace`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Render("ome", tc.files, tc.set...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "values don't meet the specifications of the schema", "the template's message, not the schema's")
		})
	}

	// The schema names the value it refuses.
	schema := map[string]struct {
		files []string
		set   []string
		want  string
	}{
		"a cluster name that is not a DNS label": {planeClusters, []string{"quotaManager.projection.clusters[0].name=East_1"}, "/quotaManager/projection/clusters/0/name"},
		"a cluster without its Secret":           {planeClusters, []string{"quotaManager.projection.clusters[0].secretName=null"}, "/quotaManager/projection/clusters/0"},
		"a Secret name that is not one":          {planeClusters, []string{"quotaManager.projection.clusters[0].secretName=East Kubeconfig"}, "/quotaManager/projection/clusters/0/secretName"},
		"a key that is not one":                  {planeClusters, []string{"quotaManager.projection.clusters[0].key=a/b"}, "/quotaManager/projection/clusters/0/key"},
		"a provider without a command": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.providers[0].name=x",
			"quotaManager.projection.clusterProfiles.providers[0].execConfig.apiVersion=client.authentication.k8s.io/v1"}, "/quotaManager/projection/clusterProfiles/providers/0/execConfig"},
		"a provider's apiVersion": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.providers[0].name=x",
			"quotaManager.projection.clusterProfiles.providers[0].execConfig.apiVersion=v1", "quotaManager.projection.clusterProfiles.providers[0].execConfig.command=x"},
			"/quotaManager/projection/clusterProfiles/providers/0/execConfig/apiVersion"},
		"an unknown provider field": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.providers[0].name=x",
			"quotaManager.projection.clusterProfiles.providers[0].execConfig.apiVersion=client.authentication.k8s.io/v1",
			"quotaManager.projection.clusterProfiles.providers[0].execConfig.comand=x"}, "comand"},
		"no providers at all":  {planeProfiles, []string{"quotaManager.projection.clusterProfiles.providers={}"}, "/quotaManager/projection/clusterProfiles/providers"},
		"a profiles namespace": {planeProfiles, []string{"quotaManager.projection.clusterProfiles.namespace=Fleet"}, "/quotaManager/projection/clusterProfiles/namespace"},
	}
	for name, tc := range schema {
		t.Run(name, func(t *testing.T) {
			_, err := Render("ome", tc.files, tc.set...)
			require.Error(t, err)
			require.Contains(t, err.Error(), "values don't meet the specifications of the schema")
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestPlaneClusterRole: a plane reads no Node, Kueue object or DRA device
// of its own cluster, so its ClusterRole has none of those rules, and it
// gets no Role on Kueue's configuration; the tree, its status, root's
// finalizer, the CRD's schema, Events, the webhook's objects and the access
// review that answers who may release copies stay.
func TestPlaneClusterRole(t *testing.T) {
	withKueue := Cluster{"v1 Namespace  kueue-system": {"metadata": map[string]any{"name": "kueue-system"}}, sliceKey: APIServerSlice}
	for name, files := range map[string][]string{"clusters": planeClusters, "clusterProfiles": planeProfiles} {
		t.Run(name, func(t *testing.T) {
			r, err := RenderIn(withKueue, "ome", files)
			require.NoError(t, err)
			cr := convert[rbacv1.ClusterRole](t, r.Get("ClusterRole", "ome-quota-manager"))
			require.Equal(t, []string{
				"ome.io acceleratorquotas: get,list,watch,create",
				"ome.io acceleratorquotas: update", // the copies finalizer on its teams
				"ome.io acceleratorquotas/status: patch",
				"apiextensions.k8s.io customresourcedefinitions/acceleratorquotas.ome.io: get",
				" events: create,patch",
				"ome.io admissionledgers: create",
				"ome.io admissionledgers/ome-quota-manager: get,list,watch,update",
				"admissionregistration.k8s.io validatingwebhookconfigurations/ome-quota-manager.ome.io: get,list,watch,update,patch",
				"authorization.k8s.io subjectaccessreviews: create",
			}, rules(cr.Rules))
			require.Nil(t, r.Get("Role", "ome-quota-manager-kueue-config"))
			require.Contains(t, deployment(t, r).Spec.Template.Spec.Containers[0].Args, "--dra-kueue-config=")
		})
	}
}

// TestNotes: the release notes say what is true in each mode: a plane's
// inventory and no advice to enroll namespaces; a member's remoteAccess
// identity and how to mint its token; one cluster, one mode.
func TestNotes(t *testing.T) {
	clusters := render(t, planeClusters).Notes
	require.Contains(t, clusters, "This is a management plane")
	require.Contains(t, clusters, "labelled\nome.io/quota-origin=fleet-1.")
	require.Contains(t, clusters, "Its 2 member cluster(s), from ConfigMap ome-quota-manager-members:\n"+
		"  east: Secret east-kubeconfig, key kubeconfig\n  west: Secret west-kubeconfig, key config\n")
	require.Contains(t, clusters, "One cluster runs one mode: this plane is not its own member")
	require.NotContains(t, clusters, "No namespace is enrolled")
	require.NotContains(t, clusters, "ClusterProfiles of namespace")

	profiles := render(t, planeProfiles).Notes
	require.Contains(t, profiles, "labelled\nome.io/quota-origin=ome-quota-manager.", "the manager's default origin")
	require.Contains(t, profiles, `Its members are the ClusterProfiles of namespace ome that match "fleet=gpu",`)
	require.Contains(t, profiles, "through its status.accessProviders entry named secretreader.")
	require.Contains(t, profiles, "The secretreader plugin reads each member's token from the Secret named after the cluster,\nkey token, in namespace ome.")
	require.Contains(t, profiles, `kubectl -n ome get clusterprofiles -l "fleet=gpu"`)
	require.Contains(t, profiles, "One cluster runs one mode")
	require.NotContains(t, profiles, "No namespace is enrolled")
	require.NotContains(t, profiles, "member cluster(s), from ConfigMap")

	other := render(t, planeProfiles, "quotaManager.projection.clusterProfiles.selector=", "quotaManager.projection.clusterProfiles.namespace=fleet-system",
		"quotaManager.projection.clusterProfiles.tokenSecrets={east}").Notes
	require.Contains(t, other, "Its members are the ClusterProfiles of namespace fleet-system (every one),")
	require.Contains(t, other, "in namespace ome (one of: east).")
	require.Contains(t, other, "  kubectl -n fleet-system get clusterprofiles\n")
	custom := renderValues(t, planeProfiles, `
quotaManager:
  projection:
    clusterProfiles:
      providers:
        - name: gke
          execConfig:
            apiVersion: client.authentication.k8s.io/v1beta1
            command: /usr/bin/gke-gcloud-auth-plugin
`).Notes
	require.Contains(t, custom, "entry named gke.")
	require.NotContains(t, custom, "secretreader")

	member := render(t, install).Notes
	require.Contains(t, member, "This cluster runs in workload mode: it can be a member of a management plane, and the\nplane runs on a cluster of its own (one cluster, one mode).")
	require.NotContains(t, member, "management plane:")
	require.NotContains(t, member, "remoteAccess is on")
	require.Contains(t, render(t, nil, "quotaManager.mode=workload").Notes, "No namespace is enrolled")

	remote := render(t, install, "quotaManager.remoteAccess.enabled=true").Notes
	require.Contains(t, remote, "remoteAccess is on: a management plane may write its copies on this cluster as\n"+
		"  system:serviceaccount:ome:ome-quota-manager-remote-access\n(ClusterRole ome-quota-manager-remote-access)")
	require.Contains(t, remote, "kubectl -n ome create token ome-quota-manager-remote-access --duration=720h")
	require.NotContains(t, remote, "never expires")
	require.Contains(t, render(t, install, "quotaManager.remoteAccess.enabled=true", "quotaManager.remoteAccess.serviceAccount.legacyTokenSecret=true").Notes,
		"The Secret ome-quota-manager-remote-access-token holds a token that never expires")
}
