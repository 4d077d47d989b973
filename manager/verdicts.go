package manager

import (
	"context"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/klog/v2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/webhook"
)

// OnVerdict publishes the webhook's verdict on a write of the tree as a
// Verdict event (webhook.Reviewer.OnVerdict): the state ignores it, the
// event log keeps it, so a replay can say who changed a node and what was
// refused. It blocks only while the stream is full, as any input does.
func (m *Manager) OnVerdict(ctx context.Context, req *admissionv1.AdmissionRequest, w webhook.Write, v webhook.Verdict) {
	ev := events.Verdicted(time.Now(), w.Name, VerdictOf(req, w, v, m.opts.Identity))
	if _, err := m.stream.Publish(ctx, ev); err != nil {
		klog.FromContext(ctx).Error(err, "cannot record the webhook's verdict in the event stream", "node", w.Name, "uid", req.UID)
	}
}

// VerdictOf is the payload of the Verdict event for a verdict on w, which
// req asked for, judged by the replica named identity.
func VerdictOf(req *admissionv1.AdmissionRequest, w webhook.Write, v webhook.Verdict, identity string) *events.Verdict {
	out := &events.Verdict{
		UID: string(req.UID), User: req.UserInfo.Username, Operation: string(req.Operation),
		Allowed: v.Allowed, Code: v.Code, Message: v.Message, Warnings: v.Warnings, Replica: identity,
	}
	if len(req.UserInfo.Groups) > 0 {
		out.Groups = append([]string(nil), req.UserInfo.Groups...)
	}
	if w.Spec != nil {
		out.New = w.Spec.DeepCopy()
	}
	if len(req.OldObject.Raw) > 0 {
		var old v1beta1.AcceleratorQuota
		if json.Unmarshal(req.OldObject.Raw, &old) == nil {
			out.Old = &old.Spec
		}
	}
	return out
}
