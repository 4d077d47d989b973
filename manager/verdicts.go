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
// event (webhook.Reviewer.OnVerdict), naming this replica, so that a
// replay can say who changed a node and what was refused. A verdict
// decides no state, and anyone who reaches the webhook's port can have it
// give any number (a flood of forged reviews, admitted or denied), so it
// never enters the event stream, where it would wait beside the inputs
// that do decide state: with an event log it is appended to the log of
// verdicts, whose own bound keeps such a flood from pushing the events
// that decide state out of the main log; without one, it is not kept.
func (m *Manager) OnVerdict(ctx context.Context, node string, v *events.Verdict) {
	if m.verdicts == nil {
		return
	}
	v.Replica = m.opts.Identity
	if !m.verdicts.append(events.Verdicted(time.Now(), node, v)) {
		// Only while the manager stops: the log is closed.
		m.metrics.EventLogErrors.Inc()
		klog.FromContext(ctx).Info("the log of verdicts is closed: this verdict is not kept", "node", node, "uid", v.UID)
	}
}

// verdictLog is the log of the webhook's verdicts, numbered in a sequence
// of its own and written in batches by a recorder of its own, as the main
// log is: a review waits for neither the write nor its sync.
type verdictLog struct {
	mu   sync.Mutex
	rec  *store.Recorder
	next uint64 // the next verdict's sequence number
}

func openVerdicts(o *Options, onError func(events.Event, error)) (*verdictLog, error) {
	so, err := o.VerdictStoreOptions()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.EventLog, store.VerdictsDir)
	l, err := store.Open(dir, so)
	if err != nil {
		return nil, fmt.Errorf("the log of the webhook's verdicts %s: %w", dir, err)
	}
	return &verdictLog{rec: store.NewRecorder(l, 1024, onError), next: l.NextSeq()}, nil
}

// append numbers ev and queues it; it blocks only while the recorder's
// queue is full. It reports false when the log is closed.
func (r *verdictLog) append(ev events.Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec == nil {
		return false
	}
	ev.Seq = r.next
	r.next++
	r.rec.Record(ev)
	return true
}

// close writes what is queued and closes the log; later verdicts are not
// kept.
func (r *verdictLog) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	r.rec = nil
	return rec.Close()
}
