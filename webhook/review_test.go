package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
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
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "request.object: budget nvidia.com/gpu on a100: nominal is too long or its exponent too large to be an amount (at most 64 characters, exponent within ±30): write one such as 8, 500m or 1k"},
		},
		"a lendingLimit finer than any amount": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},"operation":"CREATE","name":"x","object":{"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1","lendingLimit":"1e-999999999"}]}}}}`),
			want: reviewWant{HTTPStatus: 200, UID: "u", Code: 400, Verdict: VerdictMalformed, Message: "budget nvidia.com/gpu on a100: lendingLimit is too long"},
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
		{Name: "team-alpha", Spec: &alpha20.Spec, Op: admissionv1.Update, Generation: 7, Old: &alpha16.Spec, UID: "uid-1", DryRun: true},
		{Name: "team-alpha", Op: admissionv1.Delete, Generation: 7, UID: "uid-1"},
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
