package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

func TestGuideTreeRoundTrip(t *testing.T) {
	ctx := context.Background()
	want := append([]*v1beta1.AcceleratorQuota{aqtest.Root().Obj()}, aqtest.GuideTree()...)
	for _, aq := range want {
		_, err := aqs.Create(ctx, aq, metav1.CreateOptions{})
		require.NoError(t, err, "creating %s", aq.Name)
	}
	t.Cleanup(func() {
		for _, aq := range want {
			_ = aqs.Delete(context.Background(), aq.Name, metav1.DeleteOptions{})
		}
	})
	for _, aq := range want {
		got, err := aqs.Get(ctx, aq.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Empty(t, cmp.Diff(aq.Spec, got.Spec, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })), "%s: spec read back differs (-wrote +read)", aq.Name)
	}
	beta, err := aqs.Get(ctx, "team-beta", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "4", beta.Spec.Budgets[0].BorrowingLimit.String())
	require.Nil(t, beta.Spec.Budgets[0].LendingLimit, "an unset lendingLimit must stay unset (all of nominal may be lent)")
}

func TestCRDRejectsBadObjects(t *testing.T) {
	ctx := context.Background()
	many := aqtest.Team("crd-many", "root")
	for i := 0; i < 17; i++ {
		many.Budget("nvidia.com/gpu", "flavor-"+string(rune('a'+i)), "1")
	}
	cases := map[string]struct {
		obj *v1beta1.AcceleratorQuota
		// raw, when set, is a JSON patch applied to obj's JSON before it is
		// sent: for values that a Quantity cannot hold.
		raw  string
		want []string // every one must appear in the apiserver's error
	}{
		"bad role": {
			obj:  aqtest.Make("crd-bad-role", "Team", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(),
			want: []string{`spec.role: Unsupported value: "Team"`, `"Cohort", "ClusterQueue"`},
		},
		"negative nominal": {
			obj:  aqtest.Team("crd-negative", "root").Budget("nvidia.com/gpu", "a100", "-1").Obj(),
			want: []string{"spec.budgets[0]", "nominal must not be negative"},
		},
		"negative borrowingLimit": {
			obj:  aqtest.Team("crd-negative-borrow", "root").Budget("nvidia.com/gpu", "a100", "1").Borrow("-2").Obj(),
			want: []string{"borrowingLimit must not be negative"},
		},
		"negative lendingLimit": {
			obj:  aqtest.Team("crd-negative-lend", "root").Budget("nvidia.com/gpu", "a100", "1").Lend("-1").Obj(),
			want: []string{"lendingLimit must not be negative"},
		},
		"an amount the quantity parser would take forever to read": {
			obj:  aqtest.Team("crd-huge-exponent", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(),
			raw:  `{"op":"replace","path":"/spec/budgets/0/nominal","value":"1e-999999999"}`,
			want: []string{"spec.budgets[0].nominal", "should match"},
		},
		"duplicate budget key": {
			obj:  aqtest.Team("crd-dup", "root").Budget("nvidia.com/gpu", "a100", "1").Budget("nvidia.com/gpu", "a100", "2").Obj(),
			want: []string{"spec.budgets[1]: Duplicate value", `"resourceFlavor":"a100"`, `"resourceName":"nvidia.com/gpu"`},
		},
		"more than 16 budgets": {
			obj:  many.Obj(),
			want: []string{"spec.budgets: Too many: 17: must have at most 16 items"},
		},
		"name not a Kueue name": {
			obj:  aqtest.Team("team.alpha", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(),
			want: []string{"metadata.name must be a lowercase RFC 1123 label"},
		},
		"flavor not a Kueue name": {
			obj:  aqtest.Team("crd-flavor", "root").Budget("nvidia.com/gpu", "A100_80GB", "1").Obj(),
			want: []string{"spec.budgets[0].resourceFlavor", "should match"},
		},
		"distribution on a Cohort": {
			obj:  withSplit(aqtest.Cohort("crd-cohort-dist", "root").Obj(), v1beta1.DistributionProportional),
			want: []string{"distribution is a team-only field and this node is a Cohort"},
		},
		"perCluster on a Cohort's budget": {
			obj:  withShares(aqtest.Cohort("crd-cohort-shares", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), "", "west"),
			want: []string{"policy and perCluster are team-only fields of a budget and this node is a Cohort"},
		},
		"Explicit without perCluster": {
			obj:  withSplit(aqtest.Team("crd-explicit", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), v1beta1.DistributionExplicit),
			want: []string{"a budget split Explicit must list each cluster's share in perCluster"},
		},
		"Proportional with perCluster": {
			obj:  withShares(aqtest.Team("crd-proportional", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), v1beta1.DistributionProportional, "west"),
			want: []string{"a budget split Proportional takes no perCluster"},
		},
		"a budget's Proportional over the spec's Explicit, with perCluster": {
			obj:  withSplit(withShares(aqtest.Team("crd-override", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), v1beta1.DistributionProportional, "west"), v1beta1.DistributionExplicit),
			want: []string{"a budget split Proportional takes no perCluster"},
		},
		"an unknown policy": {
			obj:  withSplit(aqtest.Team("crd-policy", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), "Even"),
			want: []string{`spec.distribution.policy: Unsupported value: "Even"`},
		},
		"a share without a cluster": {
			obj:  withShares(aqtest.Team("crd-share-name", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), v1beta1.DistributionExplicit, ""),
			want: []string{"spec.budgets[0].perCluster[0].cluster"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.raw == "" {
				_, err = aqs.Create(ctx, tc.obj, metav1.CreateOptions{})
			} else {
				err = createPatched(ctx, tc.obj, tc.raw)
			}
			require.Error(t, err, "the apiserver accepted %s", tc.obj.Name)
			require.True(t, apierrors.IsInvalid(err), "want an Invalid error from the apiserver, got %v", err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			_, getErr := aqs.Get(ctx, tc.obj.Name, metav1.GetOptions{})
			require.True(t, apierrors.IsNotFound(getErr), "a rejected object must not be stored")
		})
	}
}

// withSplit sets the spec's distribution policy (none when "").
func withSplit(aq *v1beta1.AcceleratorQuota, policy v1beta1.DistributionPolicy) *v1beta1.AcceleratorQuota {
	aq.Spec.Distribution = &v1beta1.Distribution{Policy: policy}
	return aq
}

// withShares sets the first budget's policy (none when "") and gives it a
// share of 1 for each cluster named.
func withShares(aq *v1beta1.AcceleratorQuota, policy v1beta1.DistributionPolicy, clusters ...string) *v1beta1.AcceleratorQuota {
	b := &aq.Spec.Budgets[0]
	b.Policy = policy
	for _, c := range clusters {
		b.PerCluster = append(b.PerCluster, v1beta1.ClusterShare{Cluster: c, Nominal: resource.MustParse("1")})
	}
	return aq
}

// The management-mode split fields are stored as OME's CRD names them: a
// team's distribution policy, a budget's policy and its perCluster shares
// keyed by cluster.
func TestCRDStoresSplitFields(t *testing.T) {
	ctx := context.Background()
	explicit := withShares(aqtest.Team("crd-split-explicit", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), "", "west", "east")
	withSplit(explicit, v1beta1.DistributionExplicit)
	proportional := withSplit(aqtest.Team("crd-split-proportional", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(), v1beta1.DistributionProportional)
	for _, aq := range []*v1beta1.AcceleratorQuota{explicit, proportional} {
		_, err := aqs.Create(ctx, aq, metav1.CreateOptions{})
		require.NoError(t, err, aq.Name)
		t.Cleanup(func() { _ = aqs.Delete(context.Background(), aq.Name, metav1.DeleteOptions{}) })
	}
	got, err := aqs.Get(ctx, explicit.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, v1beta1.DistributionExplicit, got.Spec.Distribution.Policy)
	shares := got.Spec.Budgets[0].PerCluster
	require.Len(t, shares, 2)
	// Under the schema's own name: a field the schema did not name would
	// have been pruned.
	require.Equal(t, []string{"west", "east"}, []string{shares[0].Cluster, shares[1].Cluster})
}

func TestStatusIsASubresource(t *testing.T) {
	ctx := context.Background()
	aq, err := aqs.Create(ctx, aqtest.Team("status-sub", "root").Budget("nvidia.com/gpu", "a100", "3").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), "status-sub", metav1.DeleteOptions{}) })

	// A status written through the main resource is dropped...
	aq.Status.Summary = &v1beta1.StatusSummary{Nominal: "99"}
	aq, err = aqs.Update(ctx, aq, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Nil(t, aq.Status.Summary)
	// ...and a spec written through the status subresource is dropped too.
	aq.Status.Summary = &v1beta1.StatusSummary{Nominal: "3"}
	aq.Spec.Budgets[0].Nominal = resource.MustParse("5")
	aq, err = aqs.UpdateStatus(ctx, aq, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, "3", aq.Status.Summary.Nominal)
	require.Equal(t, "3", aq.Spec.Budgets[0].Nominal.String())
}

func TestKubectlGetShowsPrinterColumns(t *testing.T) {
	ctx := context.Background()
	objs := []*v1beta1.AcceleratorQuota{
		aqtest.Cohort("print-group", "root").Budget("nvidia.com/gpu", "a100", "24").Obj(),
		aqtest.Team("print-team", "print-group").Budget("nvidia.com/gpu", "a100", "8").Budget("google.com/tpu", "v5e", "4").Obj(),
	}
	for _, o := range objs {
		_, err := aqs.Create(ctx, o, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = aqs.Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
	}
	// The manager writes these; here the test plays its part.
	team, err := aqs.Get(ctx, "print-team", metav1.GetOptions{})
	require.NoError(t, err)
	team.Status.Summary = &v1beta1.StatusSummary{Nominal: "nvidia.com/gpu@a100=8,google.com/tpu@v5e=4", Admitted: "nvidia.com/gpu@a100=3,google.com/tpu@v5e=0"}
	team.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Admitted", Message: "node is a valid member of the quota tree", LastTransitionTime: metav1.Now()}}
	_, err = aqs.UpdateStatus(ctx, team, metav1.UpdateOptions{})
	require.NoError(t, err)

	out, err := cluster.Kubectl(ctx, "get", "aq", "print-group", "print-team")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Equal(t, []string{"NAME", "ROLE", "PARENT", "NOMINAL", "ADMITTED", "READY", "AGE"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"print-group", "Cohort", "root"}, strings.Fields(lines[1])[:3], out)
	f := strings.Fields(lines[2])
	require.Equal(t, []string{"print-team", "ClusterQueue", "print-group", "nvidia.com/gpu@a100=8,google.com/tpu@v5e=4", "nvidia.com/gpu@a100=3,google.com/tpu@v5e=0", "True"}, f[:6], out)

	// The short name and the category work too.
	out, err = cluster.Kubectl(ctx, "get", "ome", "-o", "name")
	require.NoError(t, err)
	require.Contains(t, out, "acceleratorquota.ome.io/print-team")
}

// createPatched creates obj after applying one JSON patch operation to its
// JSON form, posted as it is through the typed client's REST client.
func createPatched(ctx context.Context, obj *v1beta1.AcceleratorQuota, op string) error {
	cp := obj.DeepCopy()
	cp.APIVersion, cp.Kind = v1beta1.SchemeGroupVersion.String(), "AcceleratorQuota"
	doc, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	patch, err := jsonpatch.DecodePatch([]byte("[" + op + "]"))
	if err != nil {
		return err
	}
	if doc, err = patch.Apply(doc); err != nil {
		return err
	}
	return quotas.OmeV1beta1().RESTClient().Post().Resource("acceleratorquotas").Body(doc).Do(ctx).Error()
}
