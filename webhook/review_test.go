package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

var aqKind = metav1.GroupVersionKind{Group: "ome.io", Version: "v1beta1", Kind: "AcceleratorQuota"}

// reviewOf encodes an AdmissionReview for a write of obj (a delete when
// op is DELETE, with old as the old object).
func reviewOf(t testing.TB, op admissionv1.Operation, name string, obj, old *v1beta1.AcceleratorQuota, dryRun bool) []byte {
	t.Helper()
	raw := func(aq *v1beta1.AcceleratorQuota) runtime.RawExtension {
		if aq == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(aq)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	rev := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "uid-1", Kind: aqKind, Name: name, Operation: op, DryRun: &dryRun,
			Resource: metav1.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "acceleratorquotas"},
			Object:   raw(obj), OldObject: raw(old),
		},
	}
	b, err := json.Marshal(rev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func guideReviewer() *Reviewer {
	return &Reviewer{
		Judge:  StaticJudge(func() *Inputs { return guideInputs() }),
		Synced: func() bool { return true },
	}
}

type reviewWant struct {
	HTTPStatus int
	UID        string
	Allowed    bool
	Code       int32
	Message    string // a substring of the message
	Warnings   int
	Verdict    string
}

func summarize(r Result) reviewWant {
	got := reviewWant{HTTPStatus: r.HTTPStatus, Verdict: r.Verdict}
	if resp := r.Review.Response; resp != nil {
		got.UID, got.Allowed, got.Warnings = string(resp.UID), resp.Allowed, len(resp.Warnings)
		if resp.Result != nil {
			got.Code, got.Message = resp.Result.Code, resp.Result.Message
		}
	}
	return got
}

func TestReview(t *testing.T) {
	alpha20 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "20").Obj()
	alpha16 := aqtest.GuideTree()[1]
	relabeled := alpha16.DeepCopy()
	relabeled.Labels = map[string]string{"team": "alpha"}
	tests := map[string]struct {
		body     []byte
		reviewer *Reviewer
		want     reviewWant
	}{
		"a valid create": {
			body: reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "ml-research").Obj(), nil, false),
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 403, Verdict: VerdictDenied,
				Message: "team-x: a ClusterQueue (a team) needs at least one budget: add one to spec.budgets"},
		},
		"raising team-alpha to 20": {
			body: reviewOf(t, admissionv1.Update, "team-alpha", alpha20, alpha16, false),
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 403, Verdict: VerdictDenied,
				Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"},
		},
		"the same as a dry run": {
			body: reviewOf(t, admissionv1.Update, "team-alpha", alpha20, alpha16, true),
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 403, Verdict: VerdictDenied,
				Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"},
		},
		"an update that leaves the spec alone needs no tree": {
			body:     reviewOf(t, admissionv1.Update, "team-alpha", relabeled, alpha16, false),
			reviewer: &Reviewer{Judge: func(context.Context, Write) (Verdict, error) { return Verdict{}, errors.New("not called") }},
			want:     reviewWant{HTTPStatus: 200, UID: "uid-1", Allowed: true, Verdict: VerdictAllowed},
		},
		"a delete": {
			body: reviewOf(t, admissionv1.Delete, "team-beta", nil, aqtest.GuideTree()[2], false),
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Allowed: true, Verdict: VerdictAllowed},
		},
		"deleting ml-research": {
			body: reviewOf(t, admissionv1.Delete, "ml-research", nil, nil, false),
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 403, Verdict: VerdictDenied,
				Message: "ml-research still has children (team-alpha, team-beta)"},
		},
		"a budget above capacity": {
			body: reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "40").Obj(), nil, false),
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Allowed: true, Warnings: 1, Verdict: VerdictWarned},
		},
		"not synced yet": {
			body:     reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Obj(), nil, false),
			reviewer: &Reviewer{Judge: guideReviewer().Judge, Synced: func() bool { return false }},
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 503, Verdict: VerdictUnavailable,
				Message: "this replica of the quota manager is not ready, so it cannot judge the write: it is loading the cluster's flavors and capacity"},
		},
		"not ready, with the cause /readyz prints": {
			body: reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Obj(), nil, false),
			reviewer: &Reviewer{Judge: guideReviewer().Judge, Synced: func() bool { return false },
				NotReady: func() error { return errors.New("Kueue's CRDs are missing: install Kueue") }},
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 503, Verdict: VerdictUnavailable,
				Message: "this replica of the quota manager is not ready, so it cannot judge the write: Kueue's CRDs are missing: install Kueue"},
		},
		"root while not synced": {
			body:     reviewOf(t, admissionv1.Create, "root", aqtest.Root().Obj(), nil, false),
			reviewer: &Reviewer{Judge: guideReviewer().Judge, Synced: func() bool { return false }},
			want:     reviewWant{HTTPStatus: 200, UID: "uid-1", Allowed: true, Verdict: VerdictAllowed},
		},
		"the tree cannot be read": {
			body:     reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Obj(), nil, false),
			reviewer: &Reviewer{Judge: func(context.Context, Write) (Verdict, error) { return Verdict{}, errors.New("connection refused") }},
			want: reviewWant{HTTPStatus: 200, UID: "uid-1", Code: 503, Verdict: VerdictUnavailable,
				Message: "cannot judge this write now: connection refused; retry"},
		},
		"a status write": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"subResource":"status","operation":"UPDATE","name":"x","object":{}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Allowed: true, Verdict: VerdictAllowed},
		},
		"not JSON": {
			body: []byte("hello"),
			want: reviewWant{HTTPStatus: 400, Code: 400, Verdict: VerdictMalformed, Message: "the request body is not a JSON AdmissionReview"},
		},
		"v1beta1 review": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`),
			want: reviewWant{HTTPStatus: 400, Code: 400, Verdict: VerdictMalformed, Message: "set admissionReviewVersions to [v1]"},
		},
		"no request": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
			want: reviewWant{HTTPStatus: 400, Code: 400, Verdict: VerdictMalformed, Message: "the AdmissionReview has no request"},
		},
		"no uid": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`),
			want: reviewWant{HTTPStatus: 400, Code: 400, Verdict: VerdictMalformed, Message: "has no uid"},
		},
		"another kind": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE"}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "this webhook judges ome.io AcceleratorQuotas, not /v1 Pod"},
		},
		"no object": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x"}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "request.object: it is empty"},
		},
		"an object that is not an AcceleratorQuota": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"budgets":[{"nominal":"lots"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "request.object: it is not an AcceleratorQuota"},
		},
		"names that disagree": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"metadata":{"name":"y"},"spec":{"role":"Cohort"}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: `request.name is "x" but the object is named "y"`},
		},
		"a nominal of a billion digits": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"9e999999999"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "request.object: spec.budgets[0].nominal is too long or its exponent too large to be an amount (at most 64 characters, exponent within ±30): write one such as 8, 500m or 1k"},
		},
		"an exponent hidden in an escape, in a perCluster share": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1","perCluster":[{"cluster":"c","nominal":"9\u0065999999999"}]}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "request.object: spec.budgets[0].perCluster[0].nominal is too long or its exponent too large"},
		},
		"a lendingLimit finer than any amount": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1","lendingLimit":"1e-999999999"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "spec.budgets[0].lendingLimit is too long"},
		},
		"forty digits are read, and refused above the largest amount": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":1000000000000000000000000000000000000000}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 403, Verdict: VerdictDenied, Message: "x: budget nvidia.com/gpu on a100: nominal 1e39 is above 1P (10^15), the largest amount the quota manager counts: lower it"},
		},
		"sixty-five characters": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"0.` + strings.Repeat("0", 62) + `1"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "nominal is too long"},
		},
		"a hidden twin key": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1e-999999999","Nominal":"1"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "nominal is too long"},
		},
		"an exa of GPUs is read, and refused above the largest amount": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1E"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 403, Verdict: VerdictDenied, Message: "x: budget nvidia.com/gpu on a100: nominal 1e18 is above 1P (10^15), the largest amount the quota manager counts: lower it"},
		},
		"a delete without a name": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"DELETE"}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "request.name is empty"},
		},
		"CONNECT": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CONNECT","name":"x"}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: `operation "CONNECT" is not one this webhook judges`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := tc.reviewer
			if r == nil {
				r = guideReviewer()
			}
			got := summarize(r.Review(context.Background(), tc.body))
			if !strings.Contains(got.Message, tc.want.Message) {
				t.Errorf("message %q does not contain %q", got.Message, tc.want.Message)
			}
			got.Message = tc.want.Message
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Review (-want +got):\n%s", d)
			}
		})
	}
}

// TestReviewPassesTheWrite checks what the judge receives: the old
// object's generation and spec, the dry-run flag, and no call at all for a write
// that changes nothing the rules read.
func TestReviewPassesTheWrite(t *testing.T) {
	var got []Write
	r := &Reviewer{Synced: func() bool { return true }, Judge: func(_ context.Context, w Write) (Verdict, error) {
		got = append(got, w)
		return Verdict{Allowed: true}, nil
	}}
	alpha16 := aqtest.GuideTree()[1]
	alpha16.Generation = 7
	alpha20 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "20").Obj()
	moved := alpha16.DeepCopy()
	moved.Spec.Budgets[0].Nominal.Set(16) // 16 written another way: same shape
	for _, body := range [][]byte{
		reviewOf(t, admissionv1.Update, "team-alpha", alpha20, alpha16, true),
		reviewOf(t, admissionv1.Delete, "team-alpha", nil, alpha16, false),
		reviewOf(t, admissionv1.Update, "team-alpha", moved, alpha16, false),
	} {
		if res := r.Review(context.Background(), body); !res.Review.Response.Allowed {
			t.Fatalf("denied: %+v", res.Review.Response.Result)
		}
	}
	want := []Write{
		{Name: "team-alpha", Spec: &alpha20.Spec, Op: admissionv1.Update, Old: &alpha16.Spec, UID: "uid-1", DryRun: true},
		{Name: "team-alpha", Op: admissionv1.Delete, UID: "uid-1"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("writes judged (-want +got):\n%s", d)
	}
}

// TestReviewClipsWhatTheCallerChose checks that a caller's strings come
// back, and go to the log, bounded.
func TestReviewClipsWhatTheCallerChose(t *testing.T) {
	long := strings.Repeat("k", 1<<20)
	for _, body := range []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"` + long + `"},"operation":"CREATE"}}`,
		`{"apiVersion":"` + long + `","kind":"AdmissionReview","request":{"uid":"u"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"apiVersion":"` + long + `","kind":"x"}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"` + long + `","name":"x"}}`,
	} {
		res := guideReviewer().Review(context.Background(), []byte(body))
		msg := res.Review.Response.Result.Message
		if len(msg) > 1024 || !strings.Contains(msg, "bytes)") {
			t.Errorf("message of %d bytes, want it clipped: %.300s", len(msg), msg)
		}
	}
}

// BenchmarkReview is the webhook's own cost of a review: a label write,
// admitted without judging, and a budget write judged from scratch on the
// guide's tree; "stored" are the same writes with the objects as the API
// server sends them, with a status and managedFields.
func BenchmarkReview(b *testing.B) {
	alpha16 := aqtest.GuideTree()[1]
	relabeled := alpha16.DeepCopy()
	relabeled.Labels = map[string]string{"team": "alpha"}
	alpha12 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "12").Obj()
	r := guideReviewer()
	for name, body := range map[string][]byte{
		"label":         reviewOf(b, admissionv1.Update, "team-alpha", relabeled, alpha16, false),
		"budget":        reviewOf(b, admissionv1.Update, "team-alpha", alpha12, alpha16, false),
		"stored/label":  reviewOf(b, admissionv1.Update, "team-alpha", stored(relabeled), stored(alpha16), false),
		"stored/budget": reviewOf(b, admissionv1.Update, "team-alpha", stored(alpha12), stored(alpha16), false),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res := r.Review(context.Background(), body); !res.Review.Response.Allowed {
					b.Fatal(res.Review.Response.Result.Message)
				}
			}
		})
	}
}

// stored is aq as the API server holds it once the manager has written its
// status: metadata the server sets, a status, and the managedFields of the
// admin's writes and of the manager's status writes.
func stored(aq *v1beta1.AcceleratorQuota) *v1beta1.AcceleratorQuota {
	aq = aq.DeepCopy()
	aq.UID, aq.ResourceVersion, aq.Generation = "6f1c2d3e-0a4b-4c5d-8e9f-0a1b2c3d4e5f", "123456", 7
	aq.CreationTimestamp = metav1.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := metav1.NewTime(aq.CreationTimestamp.Time)
	gen := aq.Generation
	aq.Status.ObservedGeneration = gen
	for _, c := range []struct{ t, reason, msg string }{
		{"Ready", "Admitted", "node is a valid member of the quota tree"},
		{"Degraded", "Admitted", "no invariant violated"},
		{"Materialized", "Admitted", "enforcement objects match this node's budget"},
	} {
		st := metav1.ConditionTrue
		if c.t == "Degraded" {
			st = metav1.ConditionFalse
		}
		aq.Status.Conditions = append(aq.Status.Conditions, metav1.Condition{Type: c.t, Status: st, Reason: c.reason, Message: c.msg, ObservedGeneration: gen, LastTransitionTime: at})
	}
	aq.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &at, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:budgets":{},"f:parentRef":{"f:name":{}},"f:role":{}}}`)}},
		{Manager: "ome-quota-manager", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &at, FieldsType: "FieldsV1", Subresource: "status",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:budgets":{},"f:conditions":{"k:{\"type\":\"Degraded\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Materialized\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{},"f:summary":{"f:admitted":{},"f:nominal":{}}}}`)}},
	}
	return aq
}

// TestCRDLimits checks that the limits the webhook holds (v1beta1's
// constants) are the CRD's: the kubebuilder markers in types.go cannot name
// the constants, so the generated schema is read back.
func TestCRDLimits(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "config", "crd", "ome.io_acceleratorquotas.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("want one version with a schema, got %d", len(crd.Spec.Versions))
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	budget := spec.Properties["budgets"].Items.Schema
	share := budget.Properties["perCluster"].Items.Schema
	for _, c := range []struct {
		path string
		crd  *int64
		want int
	}{
		{"spec.budgets maxItems", spec.Properties["budgets"].MaxItems, v1beta1.MaxBudgets},
		{"spec.budgets[].perCluster maxItems", budget.Properties["perCluster"].MaxItems, v1beta1.MaxPerCluster},
		{"spec.budgets[].resourceName maxLength", ptrOf(budget.Properties["resourceName"].MaxLength), v1beta1.MaxResourceNameLength},
		{"spec.budgets[].resourceFlavor maxLength", ptrOf(budget.Properties["resourceFlavor"].MaxLength), v1beta1.MaxResourceFlavorLength},
		{"spec.budgets[].perCluster[].cluster maxLength", ptrOf(share.Properties["cluster"].MaxLength), v1beta1.MaxClusterNameLength},
		{"spec.parentRef.name maxLength", ptrOf(spec.Properties["parentRef"].Properties["name"].MaxLength), v1beta1.MaxParentNameLength},
	} {
		if c.crd == nil || *c.crd != int64(c.want) {
			t.Errorf("%s: the CRD says %v, the webhook holds %d: make the marker in api/v1beta1/types.go and the constant in api/v1beta1/limits.go agree, and regenerate the CRD", c.path, deref(c.crd), c.want)
		}
	}
}

func ptrOf(p *int64) *int64 { return p }

func deref(p *int64) any {
	if p == nil {
		return "nothing"
	}
	return *p
}

// createWith is a review of a CREATE of team-x with spec (raw JSON).
func createWith(spec string) []byte {
	return hugeReview("CREATE", spec, "")
}

// budgetsJSON is n budgets on flavors of their own, as JSON elements.
func budgetsJSON(n int) string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(`{"resourceName":"nvidia.com/gpu","resourceFlavor":"f%d","nominal":"1"}`, i))
	}
	return strings.Join(out, ",")
}

// TestReviewHoldsTheCRDsLimits checks that a spec that breaks the CRD's
// limits is refused with a message that says what, the limit and what to
// do, before any judgement (the Judge fails the test), and that a spec at
// the limits is judged.
func TestReviewHoldsTheCRDsLimits(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	one := func(field, value string) string {
		b := map[string]string{"resourceName": `"nvidia.com/gpu"`, "resourceFlavor": `"a100"`, "nominal": `"1"`}
		b[field] = value
		return fmt.Sprintf(`{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":%s,"resourceFlavor":%s,"nominal":%s}]}`,
			b["resourceName"], b["resourceFlavor"], b["nominal"])
	}
	shares := func(n int, name string) string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(`{"cluster":"c%d%s","nominal":"1"}`, i, name))
		}
		return `{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1","perCluster":[` + strings.Join(out, ",") + `]}]}`
	}
	refused := map[string]struct{ spec, msg string }{
		"17 budgets": {`{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[` + budgetsJSON(17) + `]}`,
			"request.object: spec.budgets has more than 16 budgets, the most the CRD allows (maxItems): keep at most 16, one per resourceName and resourceFlavor"},
		"17 budgets under an escaped key":            {`{"role":"ClusterQueue","bud\u0067ets":[` + budgetsJSON(17) + `]}`, "spec.budgets has more than 16 budgets"},
		"17 budgets hidden by a later key":           {`{"role":"ClusterQueue","budgets":[` + budgetsJSON(17) + `],"budgets":[]}`, "spec.budgets has more than 16 budgets"},
		"17 budgets in a spec hidden by a later one": {`{"budgets":[` + budgetsJSON(17) + `]},"spec":{"role":"ClusterQueue"}`, "spec.budgets has more than 16 budgets"},
		"257 perCluster entries": {shares(257, ""),
			"request.object: spec.budgets[0].perCluster has more than 256 entries, the most the CRD allows (maxItems): keep at most 256, one per cluster"},
		"a cluster name of 254": {shares(3, long(252)), "request.object: spec.budgets[0].perCluster[0].cluster is 254 characters long, more than the 253 the CRD allows (maxLength): shorten it"},
		"a resourceName of 254": {one("resourceName", `"`+long(254)+`"`),
			"request.object: spec.budgets[0].resourceName is 254 characters long, more than the 253 the CRD allows (maxLength): shorten it"},
		"a resourceName of 254 escaped": {one("resourceName", `"`+strings.Repeat(`\u00e9`, 254)+`"`), "spec.budgets[0].resourceName is 254 characters long"},
		"a resourceFlavor of 254":       {one("resourceFlavor", `"`+long(254)+`"`), "spec.budgets[0].resourceFlavor is 254 characters long, more than the 253"},
		"a parentRef name of 64": {`{"role":"ClusterQueue","parentRef":{"name":"` + long(64) + `"},"budgets":[` + budgetsJSON(1) + `]}`,
			"request.object: spec.parentRef.name is 64 characters long, more than the 63 the CRD allows (maxLength): shorten it"},
		// OME's CRD allows it; the manager's types do not read it.
		"a string priorityTier": {`{"role":"ClusterQueue","parentRef":{"name":"root"},"priorityTier":"high","budgets":[` + budgetsJSON(1) + `]}`,
			"it is not an AcceleratorQuota: json: cannot unmarshal string into Go struct field AcceleratorQuotaSpec.priorityTier of type int32"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			body := createWith(tc.spec)
			if name == "17 budgets in a spec hidden by a later one" {
				body = bytes.Replace(body, []byte(`"spec":`), []byte(`"spec":{"role":"Cohort"},"spec":`), 1)
			}
			r := &Reviewer{
				Judge:  func(context.Context, Write) (Verdict, error) { t.Fatal("judged"); return Verdict{}, nil },
				Synced: func() bool { t.Fatal("Synced asked"); return false },
			}
			got := summarize(r.Review(context.Background(), body))
			if !strings.Contains(got.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", got.Message, tc.msg)
			}
			got.Message = ""
			if d := cmp.Diff(reviewWant{HTTPStatus: 200, UID: "u-huge", Code: 400, Verdict: VerdictMalformed}, got); d != "" {
				t.Errorf("Review (-want +got):\n%s", d)
			}
		})
	}
	// Specs within the limits, or that the typed decoding refuses.
	notRefused := map[string]string{
		"16 budgets":                  `{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[` + budgetsJSON(16) + `]}`,
		"256 perCluster entries":      shares(256, ""),
		"a resourceName of 253":       one("resourceName", `"`+long(253)+`"`),
		"253 characters of two bytes": one("resourceFlavor", `"`+strings.Repeat("é", 253)+`"`),
		"253 escaped characters":      one("resourceFlavor", `"`+strings.Repeat(`\u00e9`, 253)+`"`),
		"a parentRef name of 63":      `{"role":"ClusterQueue","parentRef":{"name":"` + long(63) + `"},"budgets":[` + budgetsJSON(1) + `]}`,
		"budgets that are not a list": `{"role":"ClusterQueue","budgets":{"a":1}}`,
		"a name that is not a string": one("resourceName", `[1,2,"`+long(300)+`"]`),
	}
	for name, spec := range notRefused {
		t.Run(name, func(t *testing.T) {
			calls := 0
			r := &Reviewer{
				Judge:  func(context.Context, Write) (Verdict, error) { calls++; return Verdict{Allowed: true}, nil },
				Synced: func() bool { return true },
			}
			res := r.Review(context.Background(), createWith(spec))
			if msg := res.Review.Response.Result; msg != nil && strings.Contains(msg.Message, "CRD allows") {
				t.Fatalf("refused: %s", msg.Message)
			}
			if calls == 0 && res.Review.Response.Allowed {
				t.Fatal("allowed without a judgement")
			}
			if within := !strings.HasPrefix(name, "budgets that") && !strings.HasPrefix(name, "a name that"); within && calls != 1 {
				t.Fatalf("judged %d times, want once: %+v", calls, res.Review.Response.Result)
			}
		})
	}
}

// TestHugeReviewNeverReachesTheState checks the forged reviews of
// MaxRequestBytes that break the CRD's limits (50,000 budgets, and the
// like) are refused with a 400 and never reach the Judge or the state,
// and that the same counters move for a small valid review, so that they
// can.
func TestHugeReviewNeverReachesTheState(t *testing.T) {
	var judged, synced int
	judge := StaticJudge(func() *Inputs { return guideInputs() })
	r := &Reviewer{
		Judge: func(ctx context.Context, w Write) (Verdict, error) {
			judged++
			return judge(ctx, w)
		},
		Synced: func() bool { synced++; return true },
	}
	for name, tc := range hugeReviews(t) {
		start := time.Now()
		got := summarize(r.Review(context.Background(), tc.body))
		took := time.Since(start)
		if !strings.HasPrefix(got.Message, tc.msg) || got.Code != 400 || got.Verdict != VerdictMalformed || got.UID != "u-huge" {
			t.Errorf("%s: want a 400 starting %q, got %+v", name, tc.msg, got)
		}
		if judged != 0 || synced != 0 {
			t.Fatalf("%s: the Judge was called %d times and Synced %d times", name, judged, synced)
		}
		t.Logf("%s: %d bytes refused in %v", name, len(tc.body), took)
	}
	small := reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "1").Obj(), nil, false)
	if got := summarize(r.Review(context.Background(), small)); !got.Allowed {
		t.Fatalf("the small review was not allowed: %+v", got)
	}
	if judged != 1 || synced != 1 {
		t.Errorf("for the small review, the Judge was called %d times and Synced %d times, want 1 and 1", judged, synced)
	}
}

// TestReviewRatchetsTheCRDsLimits checks that an update that leaves a spec
// which breaks the CRD's limits unchanged (a label, a finalizer) is let
// through unjudged, as the API server's validation lets it, and that an
// old object that breaks them is neither judged on nor kept for the audit
// record.
func TestReviewRatchetsTheCRDsLimits(t *testing.T) {
	var writes []Write
	var audits []*events.Verdict
	r := &Reviewer{
		Judge: func(_ context.Context, w Write) (Verdict, error) {
			writes = append(writes, w)
			return Verdict{Allowed: true}, nil
		},
		Synced:    func() bool { return true },
		OnVerdict: func(_ context.Context, _ string, v *events.Verdict) { audits = append(audits, v) },
	}
	huge := hugeSpec(20, 0)
	if res := r.Review(context.Background(), hugeReview("UPDATE", huge, huge)); !res.Review.Response.Allowed || len(writes) != 0 {
		t.Fatalf("an unchanged spec: allowed %v, judged %d times", res.Review.Response.Allowed, len(writes))
	}
	if res := r.Review(context.Background(), hugeReview("UPDATE", hugeSpec(21, 0), huge)); res.Review.Response.Allowed || len(writes) != 0 {
		t.Fatalf("a changed spec: allowed %v, judged %d times", res.Review.Response.Allowed, len(writes))
	}
	small := hugeSpec(1, 0)
	for _, op := range []string{"UPDATE", "DELETE"} {
		writes, audits = nil, nil
		if res := r.Review(context.Background(), hugeReview(op, small, huge)); !res.Review.Response.Allowed || len(writes) != 1 || len(audits) != 1 {
			t.Fatalf("%s from a spec that breaks the limits: allowed %v, judged %d times, %d audits", op, res.Review.Response.Allowed, len(writes), len(audits))
		}
		if w := writes[0]; w.Old != nil || w.Base != "7" {
			t.Errorf("%s: judged with old %v, base %q; want no old spec, and base 7", op, w.Old, w.Base)
		}
		if audits[0].Old != nil {
			t.Errorf("%s: the audit record holds the old spec of %d budgets", op, len(audits[0].Old.Budgets))
		}
	}
}

// TestOperationLabels checks that an operation that is not CREATE, UPDATE
// or DELETE is labelled "other" in the verdicts metric, whether it is
// judged (Review) or refused unjudged (Refuse).
func TestOperationLabels(t *testing.T) {
	review := func(op string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"` + op + `","name":"team-alpha"}}`)
	}
	r := guideReviewer()
	for op, want := range map[string]string{
		"DELETE": "DELETE", "CREATE": "CREATE", "UPDATE": "UPDATE",
		"CONNECT": "other", "delete": "other", "": "other", strings.Repeat("X", 1000): "other", "\\u0000": "other",
	} {
		if got := r.Review(context.Background(), review(op)).Operation; got != want {
			t.Errorf("Review of operation %.20q: label %q, want %q", op, got, want)
		}
		if got := r.Refuse(review(op), "busy").Operation; got != want {
			t.Errorf("Refuse of operation %.20q: label %q, want %q", op, got, want)
		}
	}
}

// A copy that a management plane projected here is written, unmarked and
// deleted by the plane alone; a label-only write of it is judged too. The
// one way around: a user who may release copies marks one for release,
// then deletes it, and that deletion is judged (and so recorded).
func TestReviewGuardsCopies(t *testing.T) {
	r := guideReviewer()
	r.Planes = []string{"system:serviceaccount:ome:plane"}
	copyOf := aqtest.Team("team-gamma", "ml-research").Budget("nvidia.com/gpu", "a100", "0").Obj()
	copyOf.Labels = map[string]string{v1beta1.OriginLabel: "plane-1"}
	relabeled := copyOf.DeepCopy()
	relabeled.Labels = map[string]string{v1beta1.OriginLabel: "plane-1", "team": "x"}
	local := aqtest.Team("team-gamma", "ml-research").Budget("nvidia.com/gpu", "a100", "0").Obj()
	withAnnotations := func(aq *v1beta1.AcceleratorQuota, kv ...string) *v1beta1.AcceleratorQuota {
		aq = aq.DeepCopy()
		aq.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			aq.Annotations[kv[i]] = kv[i+1]
		}
		return aq
	}
	marked := withAnnotations(copyOf, v1beta1.ReleaseAnnotation, "plane-1")
	markedOther := withAnnotations(copyOf, v1beta1.ReleaseAnnotation, "plane-2")
	markedAnnotated := withAnnotations(copyOf, v1beta1.ReleaseAnnotation, "plane-1", v1beta1.ClusterAnnotation, "east")
	markedRelabeled := withAnnotations(relabeled, v1beta1.ReleaseAnnotation, "plane-1")
	markedRaised := withAnnotations(copyOf, v1beta1.ReleaseAnnotation, "plane-1")
	markedRaised.Spec.Budgets[0].Nominal = resource.MustParse("1")
	released := 0
	r.MayRelease = func(_ context.Context, u authenticationv1.UserInfo, name string) (bool, error) {
		released++
		if name != "team-gamma" {
			t.Errorf("MayRelease asked of %q, want team-gamma", name)
		}
		if u.Username == "carol" {
			return false, errors.New("connection refused")
		}
		return u.Username == "alice", nil
	}
	as := func(user string, body []byte) []byte {
		var rev admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &rev); err != nil {
			t.Fatal(err)
		}
		rev.Request.UserInfo.Username = user
		b, err := json.Marshal(rev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, tc := range map[string]struct {
		user     string
		review   []byte
		allowed  bool
		judged   bool
		code     int
		contains string
	}{
		"the plane creates a copy":         {user: "system:serviceaccount:ome:plane", review: reviewOf(t, admissionv1.Create, "team-gamma", copyOf, nil, false), allowed: true, judged: true},
		"an admin forges a copy":           {user: "alice", review: reviewOf(t, admissionv1.Create, "team-gamma", copyOf, nil, false), contains: `team-gamma is a copy of a fleet node, projected by management plane "plane-1": only the plane changes it`},
		"an admin relabels a copy":         {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", relabeled, copyOf, false), contains: "only the plane changes it"},
		"an admin unmarks a copy":          {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", local, copyOf, false), contains: "only the plane changes it"},
		"an admin deletes a copy":          {user: "alice", review: reviewOf(t, admissionv1.Delete, "team-gamma", nil, copyOf, false), contains: "only the plane changes it"},
		"the plane relabels its copy":      {user: "system:serviceaccount:ome:plane", review: reviewOf(t, admissionv1.Update, "team-gamma", relabeled, copyOf, false), allowed: true},
		"an admin writes a node of theirs": {user: "alice", review: reviewOf(t, admissionv1.Create, "team-gamma", local, nil, false), allowed: true, judged: true},
		"an admin deletes a copy, told how to release": {user: "alice", review: reviewOf(t, admissionv1.Delete, "team-gamma", nil, copyOf, false),
			contains: "change the node on the plane; a copy of a plane that no longer reaches this cluster is removed by whoever may release it (cluster-admin may): kubectl ome quota release --origin plane-1"},
		"an admin marks a copy for release":                {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", marked, copyOf, false), allowed: true},
		"an admin deletes a copy marked":                   {user: "alice", review: reviewOf(t, admissionv1.Delete, "team-gamma", nil, marked, false), allowed: true, judged: true},
		"a user who may not release marks a copy":          {user: "bob", review: reviewOf(t, admissionv1.Update, "team-gamma", marked, copyOf, false), contains: `only the plane changes it (system:serviceaccount:ome:plane); change the node on the plane; bob may not release it either: releasing a copy needs the verb "release" on acceleratorquotas.ome.io`},
		"a user who may not release deletes it":            {user: "bob", review: reviewOf(t, admissionv1.Delete, "team-gamma", nil, marked, false), contains: "bob may not release it either"},
		"an admin marks and relabels at once":              {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", markedRelabeled, copyOf, false), contains: "only the plane changes it"},
		"an admin marks with another origin":               {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", markedOther, copyOf, false), contains: "only the plane changes it"},
		"an admin marks and raises at once":                {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", markedRaised, copyOf, false), contains: "only the plane changes it"},
		"an admin marks and changes an annotation":         {user: "alice", review: reviewOf(t, admissionv1.Update, "team-gamma", markedAnnotated, copyOf, false), contains: "only the plane changes it"},
		"an admin deletes a copy of another origin's mark": {user: "alice", review: reviewOf(t, admissionv1.Delete, "team-gamma", nil, markedOther, false), contains: "only the plane changes it"},
		"the API server cannot say who may release":        {user: "carol", review: reviewOf(t, admissionv1.Delete, "team-gamma", nil, marked, false), code: 503, contains: "cannot ask the API server whether carol may release team-gamma: connection refused; retry in a few seconds"},
	} {
		judged := 0
		judge := r.Judge
		r.Judge = func(ctx context.Context, w Write) (Verdict, error) { judged++; return judge(ctx, w) }
		res := r.Review(context.Background(), as(tc.user, tc.review))
		r.Judge = judge
		resp := res.Review.Response
		code := tc.code
		if code == 0 {
			code = 403
		}
		if resp.Allowed != tc.allowed || (tc.contains != "" && !strings.Contains(resp.Result.Message, tc.contains)) {
			t.Errorf("%s: allowed %t (%v), want %t with %q", name, resp.Allowed, resp.Result, tc.allowed, tc.contains)
		}
		if !tc.allowed && int(resp.Result.Code) != code {
			t.Errorf("%s: code %d verdict %s, want %d", name, resp.Result.Code, res.Verdict, code)
		}
		if tc.judged != (judged == 1) {
			t.Errorf("%s: judged %d times, want judged %t", name, judged, tc.judged)
		}
	}
	if released != 5 {
		t.Errorf("MayRelease asked %d times, want 5 (each release step, and no other write)", released)
	}
}

// A reviewer with no MayRelease refuses the release steps of a copy like
// any other write of it.
func TestReviewGuardsCopiesWithoutRelease(t *testing.T) {
	r := guideReviewer()
	r.Planes = []string{"system:serviceaccount:ome:plane"}
	copyOf := aqtest.Team("team-gamma", "ml-research").Budget("nvidia.com/gpu", "a100", "0").Obj()
	copyOf.Labels = map[string]string{v1beta1.OriginLabel: "plane-1"}
	marked := copyOf.DeepCopy()
	marked.Annotations = map[string]string{v1beta1.ReleaseAnnotation: "plane-1"}
	for name, review := range map[string][]byte{
		"mark":   reviewOf(t, admissionv1.Update, "team-gamma", marked, copyOf, false),
		"delete": reviewOf(t, admissionv1.Delete, "team-gamma", nil, marked, false),
	} {
		resp := r.Review(context.Background(), review).Review.Response
		if resp.Allowed || !strings.Contains(resp.Result.Message, "only the plane changes it") {
			t.Errorf("%s with no MayRelease: allowed %t (%v), want refused", name, resp.Allowed, resp.Result)
		}
	}
}

// TestReviewRefusesNamesTooLong: the CRD takes names of at most 63
// characters, as a parentRef and the admission ledger do. A create or an
// update of a longer name (a forged review, or a CRD without that rule)
// is refused with the limit, never judged, and so never reserved.
func TestReviewRefusesNamesTooLong(t *testing.T) {
	long := "team-" + strings.Repeat("x", 59)
	r := &Reviewer{Synced: func() bool { return true }, Judge: func(context.Context, Write) (Verdict, error) {
		t.Fatal("the Judge was called")
		return Verdict{}, nil
	}}
	team := aqtest.Team(long, "ml-research").Budget(gpu, "a100", "1").Obj()
	raised := aqtest.Team(long, "ml-research").Budget(gpu, "a100", "2").Obj()
	for name, body := range map[string][]byte{
		"create": reviewOf(t, admissionv1.Create, long, stored(team), nil, false),
		"update": reviewOf(t, admissionv1.Update, long, stored(raised), stored(team), false),
	} {
		t.Run(name, func(t *testing.T) {
			resp := r.Review(context.Background(), body).Review.Response
			want := "metadata.name is 64 characters long, more than 63, the most the quota manager's CRD allows (a parentRef and the admission ledger hold no more): choose a shorter name"
			if resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, want) {
				t.Errorf("got %+v, want a 400 saying %q", resp.Result, want)
			}
		})
	}
}

// TestReviewRefusesWhatTheLedgerCannotHold: a reservation copies the
// review's uid, the object's uid and the base into fields the ledger's
// CRD bounds (64, 64 and 32 bytes), and the state reads a base as a
// number. A review beyond them (only a forged one is) is refused with
// the bound, before it is judged: nothing is read or written for it, and
// no reservation the ledger would refuse, or that could never settle, is
// made.
func TestReviewRefusesWhatTheLedgerCannotHold(t *testing.T) {
	r := &Reviewer{Synced: func() bool { return true }, Judge: func(context.Context, Write) (Verdict, error) {
		t.Fatal("the Judge was called")
		return Verdict{}, nil
	}}
	team := stored(aqtest.Team("team-x", "ml-research").Budget(gpu, "a100", "1").Obj())
	raised := stored(aqtest.Team("team-x", "ml-research").Budget(gpu, "a100", "2").Obj())
	with := func(op admissionv1.Operation, edit func(req *admissionv1.AdmissionRequest, obj, old *v1beta1.AcceleratorQuota)) []byte {
		obj, old := raised.DeepCopy(), team.DeepCopy()
		obj.UID, old.UID, obj.ResourceVersion, old.ResourceVersion = "u-x", "u-x", "7", "7"
		var rev admissionv1.AdmissionReview
		if err := json.Unmarshal(reviewOf(t, op, "team-x", nil, nil, false), &rev); err != nil {
			t.Fatal(err)
		}
		edit(rev.Request, obj, old)
		if op != admissionv1.Delete {
			rev.Request.Object.Raw, _ = json.Marshal(obj)
		}
		if op != admissionv1.Create {
			rev.Request.OldObject.Raw, _ = json.Marshal(old)
		}
		b, err := json.Marshal(rev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := strings.Repeat("9", 65)
	for name, tc := range map[string]struct {
		body []byte
		want string
	}{
		"a review's uid": {with(admissionv1.Update, func(req *admissionv1.AdmissionRequest, _, _ *v1beta1.AcceleratorQuota) { req.UID = types.UID(long) }),
			"request.uid is 65 bytes long, more than the 64 the admission ledger holds"},
		"an object's uid": {with(admissionv1.Create, func(_ *admissionv1.AdmissionRequest, obj, _ *v1beta1.AcceleratorQuota) { obj.UID = types.UID(long) }),
			"the object's metadata.uid is 65 bytes long, more than the 64"},
		"a base too long": {with(admissionv1.Delete, func(_ *admissionv1.AdmissionRequest, _, old *v1beta1.AcceleratorQuota) {
			old.ResourceVersion = long[:33]
		}),
			"metadata.resourceVersion is 33 bytes long, more than the 32"},
		"a base that is no number": {with(admissionv1.Update, func(_ *admissionv1.AdmissionRequest, _, old *v1beta1.AcceleratorQuota) { old.ResourceVersion = "abc" }),
			`metadata.resourceVersion "abc" is not a positive number`},
	} {
		t.Run(name, func(t *testing.T) {
			resp := r.Review(context.Background(), tc.body).Review.Response
			if resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("got %+v, want a 400 saying %q", resp.Result, tc.want)
			}
		})
	}
}
