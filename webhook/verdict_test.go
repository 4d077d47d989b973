package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"ome.io/quota-manager/api/v1beta1/aqtest"
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
	r := guideReviewer()
	r.OnVerdict = func(_ context.Context, req *admissionv1.AdmissionRequest, w Write, v Verdict) {
		got = append(got, seen{req.UserInfo.Username, w.Name, v.Allowed, v.Message})
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
}
