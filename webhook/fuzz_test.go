package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "k8s.io/apimachinery/pkg/util/json"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// FuzzReview feeds arbitrary bodies to the decode-and-judge function: it
// must never panic, always answer with a response that encodes, echo the
// request's uid whenever it answers 200, and explain every denial.
func FuzzReview(f *testing.F) {
	tree := aqtest.GuideTree()
	alpha20 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "20").Obj()
	for _, seed := range [][]byte{
		reviewOf(f, admissionv1.Create, "team-x", aqtest.Team("team-x", "ml-research").Budget(gpu, "a100", "1").Obj(), nil, false),
		reviewOf(f, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "40").Obj(), nil, true),
		reviewOf(f, admissionv1.Update, "team-alpha", alpha20, tree[1], false),
		reviewOf(f, admissionv1.Update, "root", aqtest.Cohort("root", "team-beta").Obj(), aqtest.Root().Obj(), false),
		reviewOf(f, admissionv1.Delete, "ml-research", nil, tree[0], false),
		reviewOf(f, admissionv1.Delete, "root", nil, nil, false),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"Cohort","parentRef":{"name":"x"},"budgets":[{"resourceName":"a","resourceFlavor":"a100","nominal":"1e18"},{"resourceName":"a","resourceFlavor":"a100","nominal":"-1"}]}}}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"UPDATE","name":"root","object":{"spec":{"role":"ClusterQueue"}},"oldObject":null}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","object":"x"}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE","name":"","kind":{"group":"ome.io","kind":"AcceleratorQuota"}}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"r","resourceFlavor":"a100","nominal":"9e99","borrowingLimit":"1e-30","lendingLimit":"123456789012345678901234567890.5"}]}}}}`),
		hugeReview("CREATE", hugeSpec(17, 0), ""),
		hugeReview("UPDATE", hugeSpec(2, 3), hugeSpec(17, 0)),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"bud\u0067ets":[{"resourceName":"r\"\\","resourceFlavor":"a100","nominal":"1","perCluster":[{"cluster":"c","nominal":1}]}]}}}}`),
		[]byte(`{}`),
		[]byte(`[]`),
		[]byte(`null`),
		[]byte(``),
		[]byte("\xff\xfe"),
	} {
		f.Add(seed)
	}
	r := guideReviewer()
	judge := r.Judge
	var breaks string
	r.Judge = func(ctx context.Context, w Write) (Verdict, error) {
		// Nothing that breaks the CRD's limits is judged.
		if breaks = breaksLimits(w.Spec); breaks == "" && w.Old != nil {
			breaks = breaksLimits(w.Old)
		}
		return judge(ctx, w)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		breaks = ""
		res := r.Review(context.Background(), body)
		if breaks != "" {
			t.Fatalf("judged a spec that breaks the CRD's limits (%s), for %q", breaks, body)
		}
		if res.Review == nil || res.Review.Response == nil {
			t.Fatalf("no response for %q", body)
		}
		resp := res.Review.Response
		switch res.HTTPStatus {
		case 200:
			var in admissionv1.AdmissionReview
			if err := json.Unmarshal(body, &in); err == nil && in.Request != nil && resp.UID != in.Request.UID {
				t.Fatalf("uid %q answered as %q", in.Request.UID, resp.UID)
			}
			if resp.UID == "" {
				t.Fatalf("200 without a uid for %q", body)
			}
		case 400:
			if resp.Allowed {
				t.Fatalf("a 400 that allows, for %q", body)
			}
		default:
			t.Fatalf("HTTP status %d for %q", res.HTTPStatus, body)
		}
		if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "" || resp.Result.Code == 0) {
			t.Fatalf("a denial without a code and message, for %q: %+v", body, resp.Result)
		}
		switch res.Verdict {
		case VerdictAllowed, VerdictWarned, VerdictDenied, VerdictMalformed, VerdictUnavailable:
		default:
			t.Fatalf("verdict %q", res.Verdict)
		}
		switch res.Operation {
		case "CREATE", "UPDATE", "DELETE", "other":
		default:
			t.Fatalf("operation label %q", res.Operation)
		}
		if _, err := json.Marshal(res.Review); err != nil {
			t.Fatalf("the answer does not encode: %v", err)
		}
	})
}

// FuzzSpecLimits checks the walk of v1beta1.CheckSpecLimits against the typed
// decoding: whatever a spec decodes to, if it breaks the CRD's limits, the
// walk of its bytes refuses it.
func FuzzSpecLimits(f *testing.F) {
	for _, seed := range []string{
		hugeSpec(16, 0), hugeSpec(17, 0), hugeSpec(1, 256), hugeSpec(1, 257),
		`{"budgets":[{"resourceName":"` + strings.Repeat("a", 254) + `"}]}`,
		`{"budgets":[{"resourceFlavor":"` + strings.Repeat(`\u00e9`, 254) + `"}],"budgets":null}`,
		`{"parentRef":{"name":"` + strings.Repeat("a", 64) + `"},"parentRef":{}}`,
		`{"bud\u0067ets":[{},{},{}]}`,
		`{"budgets":[{"perCluster":[{"cluster":"` + strings.Repeat(`\"`, 254) + `"}]}]}`,
		` { "budgets" : [ { } , { "resourceName" : "x" } ] } `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		err := v1beta1.CheckSpecLimits(raw)
		var spec v1beta1.AcceleratorQuotaSpec
		if kjson.Unmarshal(raw, &spec) != nil {
			return
		}
		if b := breaksLimits(&spec); b != "" && err == nil {
			t.Fatalf("the spec decodes to one that breaks the CRD's limits (%s), and the walk let it through: %q", b, raw)
		}
	})
}

// breaksLimits names the first of the CRD's limits that spec breaks, ""
// when it breaks none.
func breaksLimits(spec *v1beta1.AcceleratorQuotaSpec) string {
	if spec == nil {
		return ""
	}
	long := func(s string, max int) bool { return utf8.RuneCountInString(s) > max }
	if len(spec.Budgets) > v1beta1.MaxBudgets {
		return fmt.Sprintf("%d budgets", len(spec.Budgets))
	}
	if spec.ParentRef != nil && long(spec.ParentRef.Name, v1beta1.MaxParentNameLength) {
		return "parentRef.name"
	}
	for i, b := range spec.Budgets {
		switch {
		case long(b.ResourceName, v1beta1.MaxResourceNameLength):
			return fmt.Sprintf("budgets[%d].resourceName", i)
		case long(b.ResourceFlavor, v1beta1.MaxResourceFlavorLength):
			return fmt.Sprintf("budgets[%d].resourceFlavor", i)
		case len(b.PerCluster) > v1beta1.MaxPerCluster:
			return fmt.Sprintf("budgets[%d]: %d perCluster", i, len(b.PerCluster))
		}
		for j, c := range b.PerCluster {
			if long(c.Cluster, v1beta1.MaxClusterNameLength) {
				return fmt.Sprintf("budgets[%d].perCluster[%d].cluster", i, j)
			}
		}
	}
	return ""
}
