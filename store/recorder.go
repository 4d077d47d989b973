package store

import (
	"sync"

	"ome.io/quota-manager/events"
)

// Recorder appends events to a Log from a goroutine of its own, so that the
// reducer's goroutine does not pay for encoding and writing: Record puts an
// event in a queue and returns, and the recorder writes whatever queued up
// meanwhile in one batch (Log.AppendBatch). Order is kept, nothing is
// dropped (Record blocks while the queue is full), and Wait lets the caller
// hold back any effect of an event (a write to the API server) until the
// event is in the log.
//
// The queue is a slice under a mutex, not a channel: handing over an event
// costs the consumer a lock and an append, and the recorder is woken only
// when the queue was empty.
type Recorder struct {
	log     *Log
	onError func(events.Event, error)
	depth   int
	done    chan struct{}

	mu   sync.Mutex
	cond *sync.Cond // queue not empty, room in the queue, written moved, closing
	// queue are the events handed over and not taken yet; spare is the
	// slice of the batch being written, to swap in next.
	queue, spare []events.Event
	closing      bool
	written      uint64 // last seq handed to the log, appended or failed
}

// NewRecorder starts a recorder of depth queued events in front of l.
// onError is called, from the recorder's goroutine, for each event the log
// refused; the log then has a gap there, which readers report.
func NewRecorder(l *Log, depth int, onError func(events.Event, error)) *Recorder {
	depth = max(depth, 1)
	r := &Recorder{log: l, onError: onError, depth: depth, done: make(chan struct{}),
		queue: make([]events.Event, 0, depth), spare: make([]events.Event, 0, depth)}
	r.cond = sync.NewCond(&r.mu)
	r.written = l.NextSeq() - 1
	go r.run()
	return r
}

func (r *Recorder) run() {
	defer close(r.done)
	for {
		r.mu.Lock()
		for len(r.queue) == 0 && !r.closing {
			r.cond.Wait()
		}
		if len(r.queue) == 0 {
			r.mu.Unlock()
			return
		}
		batch := r.queue
		r.queue = r.spare[:0]
		r.cond.Broadcast() // room in the queue
		r.mu.Unlock()

		n, err := r.log.AppendBatch(batch)
		if err != nil {
			// The failed event is a gap; the rest are appended one by one,
			// each failure reported.
			r.failed(batch[n], err)
			for _, ev := range batch[n+1:] {
				if err := r.log.Append(ev); err != nil {
					r.failed(ev, err)
				}
			}
		}
		last := batch[len(batch)-1].Seq
		clear(batch) // let the payloads go

		r.mu.Lock()
		r.written = last
		r.spare = batch[:0]
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

func (r *Recorder) failed(ev events.Event, err error) {
	if r.onError != nil {
		r.onError(ev, err)
	}
}

// Record queues ev for the log. Events must come in sequence order, from
// one goroutine. It must not be called after Close.
func (r *Recorder) Record(ev events.Event) {
	r.mu.Lock()
	for len(r.queue) >= r.depth {
		r.cond.Wait()
	}
	r.queue = append(r.queue, ev)
	if len(r.queue) == 1 {
		r.cond.Broadcast() // the recorder may be waiting for work
	}
	r.mu.Unlock()
}

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
	r.mu.Lock()
	r.closing = true
	r.cond.Broadcast()
	r.mu.Unlock()
	<-r.done
	r.mu.Lock()
	r.cond.Broadcast()
	r.mu.Unlock()
	return r.log.Close()
}
