package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/test/chart"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// planOne is a plan that writes cluster's copy with amount of
// nvidia.com/gpu@a100 (in milli-units), creating it.
func planOne(cluster string, amount state.Amount) map[string]state.CopyPlan {
	return map[string]state.CopyPlan{cluster: {Budgets: []state.PlanBudget{
		{Pair: state.Pair{Resource: "nvidia.com/gpu", Flavor: "a100"}, Nominal: amount}}}}
}

// The chart's remoteAccess values on a member create the identity a
// plane's kubeconfig uses there. With that ServiceAccount's real token,
// the member source reads the member and the copy writer writes and sweeps
// copies; the same token may not write a status, touch Kueue's queues or
// read Secrets.
func TestRemoteAccessRBAC(t *testing.T) {
	ctx := context.Background()
	r := remoteAccess(t, member)
	const name = remoteAccessName
	if s := r.Get("Secret", name+"-token"); s != nil {
		t.Errorf("the chart renders the legacy token Secret %s-token by default: the plane's token is a TokenRequest's", name)
	}
	token, err := member.ServiceAccountToken(ctx, "ome-system", name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(member.Config)
	cfg.BearerToken = token

	// What the plane does with it works.
	if _, err := aqs.Create(ctx, aqtest.Root().Obj(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	src, published := watchMember(t, "east", cfg, "plane-rbac")
	if ev := next(t, published, "the member source with the plane's token"); !ev.Member.Reachable {
		t.Fatalf("the member source with the plane's token: %+v", ev.Member)
	}
	w := &apply.CopyWriter{Origin: "plane-rbac", Quotas: versioned.NewForConfigOrDie(cfg)}
	copyOf := projector.Copies([]projector.FleetNode{
		{Name: "root", Spec: &aqtest.Root().Obj().Spec, Depth: 0, Ready: true},
		{Name: "rbac-team", UID: "u1", Generation: 1, Spec: &aqtest.Team("rbac-team", "root").Budget("nvidia.com/gpu", "a100", "1").Obj().Spec,
			Parent: "root", Depth: 1, Ready: true, Plans: planOne("east", 1000)},
	}, "east", "plane-rbac")
	have, _ := src.Objects()
	if rep := w.Apply(ctx, copyOf, have); len(rep.Failed) > 0 || len(rep.Written) != 1 {
		t.Fatalf("writing a copy with the plane's token: %+v", rep)
	}
	testutil.Eventually(t, 30*time.Second, func() string {
		have, _ = src.Objects()
		for _, o := range have {
			if o.Name == "rbac-team" {
				return ""
			}
		}
		return "the source has not seen the copy written"
	})
	if rep := w.Apply(ctx, projector.MemberCopies{}, have); len(rep.Failed) > 0 || len(rep.Swept) != 1 {
		t.Fatalf("sweeping it with the plane's token: %+v", rep)
	}

	// And nothing more: the API server's own answer for each.
	kube := kubernetes.NewForConfigOrDie(cfg)
	for _, ra := range []authorizationv1.ResourceAttributes{
		{Group: "ome.io", Resource: "acceleratorquotas", Subresource: "status", Verb: "patch"},
		{Group: "ome.io", Resource: "acceleratorquotas", Subresource: "status", Verb: "update"},
		{Group: "kueue.x-k8s.io", Resource: "clusterqueues", Verb: "create"},
		{Group: "kueue.x-k8s.io", Resource: "resourceflavors", Verb: "create"},
		{Group: "", Resource: "secrets", Verb: "list"},
		{Group: "", Resource: "nodes", Verb: "list"},
	} {
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed {
			t.Errorf("the plane's token may %s %s/%s %s", ra.Verb, ra.Group, ra.Resource, ra.Subresource)
		}
	}
	_, err = versioned.NewForConfigOrDie(cfg).OmeV1beta1().AcceleratorQuotas().UpdateStatus(ctx, &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{Name: "root"}}, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("a status write with the plane's token: %v, want Forbidden", err)
	}
}

// With remoteAccess, the member's webhook lets only the identities it
// binds change a copy: the chart passes them as
// --webhook-projection-writers; without it, the flag is not set.
func TestRemoteAccessNamesTheWriters(t *testing.T) {
	r, err := chart.Render("ome-system", nil, "quotaManager.mode=workload", "quotaManager.remoteAccess.enabled=true",
		"quotaManager.remoteAccess.subjects[0].kind=Group", "quotaManager.remoteAccess.subjects[0].name=fleet-admins",
		"quotaManager.remoteAccess.subjects[1].kind=ServiceAccount", "quotaManager.remoteAccess.subjects[1].name=plane", "quotaManager.remoteAccess.subjects[1].namespace=ome")
	if err != nil {
		t.Fatal(err)
	}
	want := "--webhook-projection-writers=system:serviceaccount:ome-system:ome-quota-manager-remote-access,group:fleet-admins,system:serviceaccount:ome:plane"
	if !strings.Contains(r.Manifest, want) {
		t.Errorf("the manager's arguments lack %q", want)
	}
	if b := r.Get("ClusterRoleBinding", "ome-quota-manager-remote-access"); b == nil || !strings.Contains(toJSON(t, b.Object["subjects"]), `"name":"fleet-admins"`) {
		t.Errorf("the binding does not name the group: %v", b)
	}
	plain, err := chart.Render("ome-system", nil, "quotaManager.mode=workload")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.Manifest, "webhook-projection-writers") || plain.Get("ClusterRole", "ome-quota-manager-remote-access") != nil {
		t.Error("without remoteAccess the chart still names writers or renders the role")
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// remoteAccessName is the identity the chart's remoteAccess values create.
const remoteAccessName = "ome-quota-manager-remote-access"

// remoteAccess creates on c what the chart's remoteAccess values render
// there (the ClusterRole, its binding and the ServiceAccount, in
// ome-system), and returns the render.
func remoteAccess(t *testing.T, c *localcluster.Cluster) *chart.Rendered {
	t.Helper()
	ctx := context.Background()
	r, err := chart.Render("ome-system", nil, "quotaManager.mode=workload", "quotaManager.remoteAccess.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNamespace(ctx, "ome-system"); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(c.Config)
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "ServiceAccount"} {
		o := r.Get(kind, remoteAccessName)
		if o == nil {
			t.Fatalf("the chart renders no %s %s: %v", kind, remoteAccessName, r.Kinds())
		}
		gvk := o.GroupVersionKind()
		res := dyn.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(kind) + "s"})
		var err error
		if kind == "ServiceAccount" {
			_, err = res.Namespace("ome-system").Create(ctx, o, metav1.CreateOptions{})
		} else {
			_, err = res.Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", kind, err)
		}
	}
	return r
}
