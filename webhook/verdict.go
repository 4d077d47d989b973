package webhook

import (
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/json"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// Verdict is the answer to one write.
type Verdict struct {
	Allowed bool
	// Code is the HTTP-style code of a denial: 403 for a rule, 400 for a
	// malformed request, 503 while the answer cannot be known yet.
	Code int32
	// Message says why a write is denied; it is empty when it is allowed.
	Message string
	// Warnings go back to the client with an admitted write; kubectl
	// prints them as "Warning: ...".
	Warnings []string
}

// verdictOf is the webhook's form of the rule book's answer: a denial is a
// 403.
func verdictOf(a state.Admission) Verdict {
	if a.Allowed {
		return Verdict{Allowed: true, Warnings: a.Warnings}
	}
	return Verdict{Code: http.StatusForbidden, Message: a.Message}
}

// auditOf is the audit record of verdict v on w, which req asked for (the
// payload of a Verdict event): who asked, the spec before and after, the
// answer. The replica's name is the caller's to add.
func auditOf(req *admissionv1.AdmissionRequest, w Write, v Verdict) *events.Verdict {
	out := &events.Verdict{
		UID: string(req.UID), User: req.UserInfo.Username, Operation: string(req.Operation),
		Allowed: v.Allowed, Code: v.Code, Message: v.Message, Warnings: v.Warnings,
		ObjectUID: w.ObjectUID, Base: w.Base, Record: w.Record,
	}
	if len(req.UserInfo.Groups) > 0 {
		out.Groups = append([]string(nil), req.UserInfo.Groups...)
	}
	if w.Spec != nil {
		out.New = w.Spec.DeepCopy()
	}
	switch {
	case w.Old != nil:
		// Decoded already for the judgement (an update).
		out.Old = w.Old.DeepCopy()
	case len(req.OldObject.Raw) > 0:
		var old struct {
			Spec v1beta1.AcceleratorQuotaSpec `json:"spec"`
		}
		if json.Unmarshal(req.OldObject.Raw, &old) == nil {
			out.Old = &old.Spec
		}
	}
	return out
}
