package manager

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/webhook"
)

func TestVerdictOf(t *testing.T) {
	old := aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "16").Obj()
	raised := aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "20").Obj()
	raw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: "u-1", Operation: admissionv1.Update, OldObject: runtime.RawExtension{Raw: raw},
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"devs"}}}
	v := VerdictOf(req, webhook.Write{Name: "team-alpha", Spec: &raised.Spec, Op: admissionv1.Update},
		webhook.Verdict{Code: 403, Message: "no"}, "m1")
	ev := events.Verdicted(raised.CreationTimestamp.Time, "team-alpha", v)
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	if v.User != "alice" || v.Groups[0] != "devs" || v.UID != "u-1" || v.Operation != "UPDATE" || v.Allowed || v.Message != "no" || v.Replica != "m1" {
		t.Errorf("verdict %+v", v)
	}
	if v.Old == nil || v.Old.Budgets[0].Nominal.String() != "16" || v.New == nil || v.New.Budgets[0].Nominal.String() != "20" {
		t.Errorf("old %+v new %+v, want the budgets 16 and 20", v.Old, v.New)
	}
	// The new spec is a copy: the review's object may be reused.
	raised.Spec.Budgets[0].ResourceName = "changed"
	if v.New.Budgets[0].ResourceName != "nvidia.com/gpu" {
		t.Error("the verdict shares the written spec")
	}
}
