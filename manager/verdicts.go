package manager

import (
	"context"
	"errors"
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
// that do decide state: with an event log it is appended to a log of
// verdicts, whose own bound keeps such a flood from pushing the events
// that decide state out of the main log; without one, it is not kept. A
// verdict on an authenticated review (the API server's client
// certificate) goes to a log of its own, so that a flood of
// unauthenticated ones cannot turn it over either.
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

// verdictLogs are the two logs of verdicts: on unauthenticated reviews
// (store.VerdictsDir) and on authenticated ones
// (store.AuthenticatedVerdictsDir), each with its half of the verdicts'
// share of the bound (VerdictStoreOptions).
type verdictLogs struct {
	unauthenticated, authenticated *verdictLog
}

func openVerdicts(o *Options, onError func(events.Event, error)) (*verdictLogs, error) {
	so, err := o.VerdictStoreOptions()
	if err != nil {
		return nil, err
	}
	var ls verdictLogs
	for _, l := range []struct {
		dir string
		to  **verdictLog
	}{{store.VerdictsDir, &ls.unauthenticated}, {store.AuthenticatedVerdictsDir, &ls.authenticated}} {
		dir := filepath.Join(o.EventLog, l.dir)
		sl, err := store.Open(dir, so)
		if err != nil {
			if ls.unauthenticated != nil {
				_ = ls.unauthenticated.close()
			}
			return nil, fmt.Errorf("the log of the webhook's verdicts %s: %w", dir, err)
		}
		*l.to = &verdictLog{rec: store.NewRecorder(sl, 1024, onError), next: sl.NextSeq()}
	}
	return &ls, nil
}

// append queues ev in the log of its kind of verdict. It reports false
// when the log is closed.
func (ls *verdictLogs) append(ev events.Event) bool {
	if ev.Verdict != nil && ev.Verdict.Authenticated {
		return ls.authenticated.append(ev)
	}
	return ls.unauthenticated.append(ev)
}

// close closes both logs.
func (ls *verdictLogs) close() error {
	return errors.Join(ls.unauthenticated.close(), ls.authenticated.close())
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
