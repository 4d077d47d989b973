package store

import (
	"sync"

	"ome.io/quota-manager/events"
)

// Recorder appends events to a Log from a goroutine of its own, so that the
// reducer's goroutine does not pay for encoding and writing: Record hands an
// event over and returns. Order is kept, nothing is dropped (Record blocks
// while the queue is full), and Wait lets the caller hold back any effect
// of an event (a write to the API server) until the event is in the log.
type Recorder struct {
	log     *Log
	onError func(events.Event, error)

	queue chan events.Event
	done  chan struct{}

	mu      sync.Mutex
	cond    *sync.Cond
	written uint64 // last seq handed to the log, appended or failed
}

// NewRecorder starts a recorder of depth queued events in front of l.
// onError is called, from the recorder's goroutine, for each event the log
// refused; the log then has a gap there, which readers report.
func NewRecorder(l *Log, depth int, onError func(events.Event, error)) *Recorder {
	r := &Recorder{log: l, onError: onError, queue: make(chan events.Event, max(depth, 1)), done: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	r.written = l.NextSeq() - 1
	go r.run()
	return r
}

func (r *Recorder) run() {
	defer close(r.done)
	for ev := range r.queue {
		if err := r.log.Append(ev); err != nil && r.onError != nil {
			r.onError(ev, err)
		}
		r.mu.Lock()
		r.written = ev.Seq
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

// Record queues ev for the log. Events must come in sequence order, from
// one goroutine. It must not be called after Close.
func (r *Recorder) Record(ev events.Event) { r.queue <- ev }

// Wait blocks until every event up to seq has been handed to the log.
func (r *Recorder) Wait(seq uint64) {
	r.mu.Lock()
	for r.written < seq {
		select {
		case <-r.done:
			r.mu.Unlock()
			return
		default:
		}
		r.cond.Wait()
	}
	r.mu.Unlock()
}

// Close writes what is queued, then closes the log.
func (r *Recorder) Close() error {
	close(r.queue)
	<-r.done
	r.mu.Lock()
	r.cond.Broadcast()
	r.mu.Unlock()
	return r.log.Close()
}
