package manager

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"ome.io/quota-manager/events"
)

// OnVerdict publishes the webhook's verdict on a write of node as a Verdict
// event (webhook.Reviewer.OnVerdict), naming this replica: the state
// ignores it, the event log keeps it, so a replay can say who changed a
// node and what was refused. It blocks only while the stream is full, as
// any input does.
func (m *Manager) OnVerdict(ctx context.Context, node string, v *events.Verdict) {
	v.Replica = m.opts.Identity
	if _, err := m.stream.Publish(ctx, events.Verdicted(time.Now(), node, v)); err != nil {
		klog.FromContext(ctx).Error(err, "cannot record the webhook's verdict in the event stream", "node", node, "uid", v.UID)
	}
}
