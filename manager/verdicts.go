package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
)

// OnVerdict records the webhook's verdict on a write of node as a Verdict
// event (webhook.Reviewer.OnVerdict), naming this replica: the state
// ignores it, the event log keeps it, so a replay can say who changed a
// node and what was refused. An admitted verdict goes into the event
// stream, and so into the event log in order with the write it allowed;
// it blocks only while the stream is full, as any input does. A denial
// changes nothing: with an event log, it goes into the log of refused
// reviews, whose own bound keeps a flood of refused writes (anyone who
// reaches the webhook's port can send them) from pushing the events that
// decide state out of the main log.
func (m *Manager) OnVerdict(ctx context.Context, node string, v *events.Verdict) {
	v.Replica = m.opts.Identity
	ev := events.Verdicted(time.Now(), node, v)
	if !v.Allowed && m.refused != nil {
		if err := m.refused.append(ev); err != nil {
			m.metrics.EventLogErrors.Inc()
			klog.FromContext(ctx).Error(err, "cannot record the webhook's denial in the log of refused reviews", "node", node, "uid", v.UID)
		}
		return
	}
	if _, err := m.stream.Publish(ctx, ev); err != nil {
		klog.FromContext(ctx).Error(err, "cannot record the webhook's verdict in the event stream", "node", node, "uid", v.UID)
	}
}

// refusedLog is the log of refused reviews: each denial appended as it
// comes, numbered in a sequence of its own.
type refusedLog struct {
	mu  sync.Mutex
	log *store.Log
}

func openRefused(o *Options) (*refusedLog, error) {
	so, err := o.RefusedStoreOptions()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.EventLog, store.RefusedDir)
	l, err := store.Open(dir, so)
	if err != nil {
		return nil, fmt.Errorf("the log of refused reviews %s: %w", dir, err)
	}
	return &refusedLog{log: l}, nil
}

func (r *refusedLog) append(ev events.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.Seq = r.log.NextSeq()
	return r.log.Append(ev)
}

func (r *refusedLog) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.Close()
}
