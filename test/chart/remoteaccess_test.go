package chart

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestRemoteAccess: on a member, remoteAccess renders the plane's
// ServiceAccount, its ClusterRole and binding, and names it to the webhook
// as the only writer of copies. The plane's token is a TokenRequest's: the
// legacy token Secret, which only kube-controller-manager fills, is
// rendered only on request.
func TestRemoteAccess(t *testing.T) {
	const name = "ome-quota-manager-remote-access"
	r := render(t, install, "quotaManager.remoteAccess.enabled=true")
	sa := convert[corev1.ServiceAccount](t, r.Get("ServiceAccount", name))
	require.Equal(t, "ome", sa.Namespace)
	require.False(t, *sa.AutomountServiceAccountToken)
	crb := convert[rbacv1.ClusterRoleBinding](t, r.Get("ClusterRoleBinding", name))
	require.Equal(t, name, crb.RoleRef.Name)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "ome"}}, crb.Subjects)
	cr := convert[rbacv1.ClusterRole](t, r.Get("ClusterRole", name))
	require.Equal(t, []string{
		"ome.io acceleratorquotas: get,list,watch,create,patch,update,delete",
		"kueue.x-k8s.io resourceflavors: get,list,watch",
	}, rules(cr.Rules))
	require.Contains(t, deployment(t, r).Spec.Template.Spec.Containers[0].Args, "--webhook-projection-writers=system:serviceaccount:ome:"+name)
	require.Nil(t, r.Get("Secret", name+"-token"), "no legacy token Secret by default")

	legacy := render(t, install, "quotaManager.remoteAccess.enabled=true", "quotaManager.remoteAccess.serviceAccount.legacyTokenSecret=true")
	s := convert[corev1.Secret](t, legacy.Get("Secret", name+"-token"))
	require.Equal(t, corev1.SecretTypeServiceAccountToken, s.Type)
	require.Equal(t, name, s.Annotations[corev1.ServiceAccountNameKey])

	none := render(t, install, "quotaManager.remoteAccess.enabled=true", "quotaManager.remoteAccess.serviceAccount.create=false",
		"quotaManager.remoteAccess.subjects[0].kind=Group", "quotaManager.remoteAccess.subjects[0].name=fleet-planes")
	require.Nil(t, none.Get("ServiceAccount", name))
	require.Nil(t, none.Get("Secret", name+"-token"))
	require.Equal(t, []rbacv1.Subject{{Kind: "Group", Name: "fleet-planes", APIGroup: "rbac.authorization.k8s.io"}},
		convert[rbacv1.ClusterRoleBinding](t, none.Get("ClusterRoleBinding", name)).Subjects)
}
