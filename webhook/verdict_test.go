package webhook

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// OnVerdict sees each verdict Judge gives on a write that is not a dry run,
// with the request it answers; a dry run and a write left unjudged (a
// label) are not handed over.
func TestOnVerdict(t *testing.T) {
	alpha20 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "20").Obj()
	alpha16 := aqtest.GuideTree()[1]
	labelled := alpha16.DeepCopy()
	labelled.Labels = map[string]string{"x": "y"}
	type seen struct {
		user, name string
		allowed    bool
		message    string
	}
	var got []seen
	var records []*events.Verdict
	r := guideReviewer()
	r.OnVerdict = func(_ context.Context, node string, v *events.Verdict) {
		got = append(got, seen{v.User, node, v.Allowed, v.Message})
		records = append(records, v)
	}
	withUser := func(b []byte) []byte {
		// reviewOf sends no user; the API server always does.
		return []byte(string(b[:len(b)-2]) + `,"userInfo":{"username":"alice"}}}`)
	}
	r.Review(context.Background(), withUser(reviewOf(t, admissionv1.Update, "team-alpha", alpha20, alpha16, false)))
	r.Review(context.Background(), withUser(reviewOf(t, admissionv1.Update, "team-alpha", alpha20, alpha16, true)))
	r.Review(context.Background(), withUser(reviewOf(t, admissionv1.Update, "team-alpha", labelled, alpha16, false)))
	r.Review(context.Background(), withUser(reviewOf(t, admissionv1.Delete, "team-beta", nil, aqtest.GuideTree()[2], false)))
	want := []seen{
		{"alice", "team-alpha", false, "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"},
		{"alice", "team-beta", true, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("OnVerdict saw %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("verdict %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// The record carries the request and the change, old and new.
	raise := records[0]
	if raise.UID != "uid-1" || raise.Operation != "UPDATE" || raise.Code != 403 || raise.Old == nil || raise.New == nil ||
		raise.Old.Budgets[0].Nominal.String() != "16" || raise.New.Budgets[0].Nominal.String() != "20" {
		t.Errorf("the raise's record: %+v", raise)
	}
	if del := records[1]; del.Operation != "DELETE" || del.New != nil || del.Old == nil || del.Old.ParentRef.Name != "ml-research" {
		t.Errorf("the delete's record: %+v", del)
	}
	if ev := events.Verdicted(time.Now(), "team-alpha", raise); ev.Validate() != nil {
		t.Error(ev.Validate())
	}
}

// A verdict carries the record of the written object's managedFields (the
// API server's, set before it calls webhooks), none on DELETE, and says
// whether the reviews come from authenticated callers.
func TestVerdictRecordAndAuthenticated(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC))
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &at,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}
	alpha16 := aqtest.GuideTree()[1]
	alpha12 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "12").Obj()
	alpha12.ManagedFields = mf
	for _, authenticated := range []bool{false, true} {
		var records []*events.Verdict
		r := guideReviewer()
		r.Authenticated = authenticated
		r.OnVerdict = func(_ context.Context, _ string, v *events.Verdict) { records = append(records, v) }
		r.Review(context.Background(), reviewOf(t, admissionv1.Update, "team-alpha", alpha12, alpha16, false))
		r.Review(context.Background(), reviewOf(t, admissionv1.Delete, "team-beta", nil, aqtest.GuideTree()[2], false))
		if len(records) != 2 {
			t.Fatalf("OnVerdict saw %d verdicts, want 2", len(records))
		}
		if want := events.RecordOf(mf); records[0].Record != want || want == "" {
			t.Errorf("the update's record is %q, want %q", records[0].Record, want)
		}
		if records[1].Record != "" {
			t.Errorf("the delete carries a record %q", records[1].Record)
		}
		for _, v := range records {
			if v.Authenticated != authenticated {
				t.Errorf("verdict %s: authenticated %v, want %v", v.Operation, v.Authenticated, authenticated)
			}
		}
	}
}
