package store

import (
	"sync"
	"time"

	"ome.io/quota-manager/events"
)

// Recorder appends events to a Log from a goroutine of its own, so that the
// reducer's goroutine does not pay for encoding and writing: Record puts an
// event in a queue and returns, and the recorder writes what queued up since
// its last batch as one batch (Log.AppendBatch). Order is kept, nothing is
// dropped (Record blocks while the queue is full), and Wait lets the caller
// hold back any effect of an event (a write to the API server) until the
// event is in the log.
//
// Handing over an event costs the consumer a lock and an append, and
// seldom more: waking a sleeping goroutine costs more than recording an
// event, so the consumer wakes the recorder only when the recorder sleeps
// with nothing queued, when the queue is half full, or when someone waits
// for an event. While events keep coming the recorder wakes by itself every
// Linger and takes what queued up meanwhile. An event therefore reaches the
// log at most Linger after it was recorded, or at once when Wait asks for
// it.
type Recorder struct {
	log     *Log
	onError func(events.Event, error)
	depth   int
	linger  time.Duration
	done    chan struct{}
	kick    chan struct{} // wakes the recorder; buffered, never blocks

	mu   sync.Mutex
	cond *sync.Cond // room in the queue, written moved, recorder gone
	// queue are the events handed over and not taken yet; spare is the
	// slice of the batch being written, to swap in next.
	queue, spare []events.Event
	closing      bool
	idle         bool   // the recorder waits for a kick, with no timer
	waiters      int    // callers of Wait not yet satisfied
	written      uint64 // last seq handed to the log, appended or failed
}

// Linger is how long, at most, a recorded event waits in the queue before
// the recorder writes it when nobody waits for it.
const Linger = 5 * time.Millisecond

// NewRecorder starts a recorder of depth queued events in front of l.
// onError is called, from the recorder's goroutine, for each event the log
// refused; the log then has a gap there, which readers report.
func NewRecorder(l *Log, depth int, onError func(events.Event, error)) *Recorder {
	depth = max(depth, 2)
	r := &Recorder{log: l, onError: onError, depth: depth, linger: Linger,
		done: make(chan struct{}), kick: make(chan struct{}, 1),
		queue: make([]events.Event, 0, depth), spare: make([]events.Event, 0, depth)}
	r.cond = sync.NewCond(&r.mu)
	r.written = l.NextSeq() - 1
	go r.run()
	return r
}

func (r *Recorder) run() {
	defer func() {
		close(r.done)
		r.mu.Lock()
		r.cond.Broadcast() // waiters see done
		r.mu.Unlock()
	}()
	timer := time.NewTimer(r.linger)
	timer.Stop()
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			if r.closing {
				r.mu.Unlock()
				return
			}
			// Nothing queued: sleep until an event or Close kicks.
			r.idle = true
			r.mu.Unlock()
			<-r.kick
			continue
		}
		if len(r.queue) < r.depth/2 && r.waiters == 0 && !r.closing {
			// Events are coming: let a few more queue up, unless someone
			// waits for them or the queue fills.
			r.mu.Unlock()
			timer.Reset(r.linger)
			select {
			case <-timer.C:
			case <-r.kick:
				timer.Stop() // since Go 1.23 no stale tick is left behind
			}
			r.mu.Lock()
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

// wake kicks the recorder; r.mu is held.
func (r *Recorder) wake() {
	r.idle = false
	select {
	case r.kick <- struct{}{}:
	default: // a kick is pending already
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
		r.wake()
		r.cond.Wait()
	}
	r.queue = append(r.queue, ev)
	if r.idle || r.waiters > 0 || len(r.queue) >= r.depth/2 {
		r.wake()
	}
	r.mu.Unlock()
}

// Wait blocks until every event up to seq has been handed to the log.
func (r *Recorder) Wait(seq uint64) {
	r.mu.Lock()
	if r.written < seq {
		r.waiters++
		r.wake()
		for r.written < seq {
			select {
			case <-r.done:
				r.waiters--
				r.mu.Unlock()
				return
			default:
			}
			r.cond.Wait()
		}
		r.waiters--
	}
	r.mu.Unlock()
}

// Close writes what is queued, then closes the log.
func (r *Recorder) Close() error {
	r.mu.Lock()
	r.closing = true
	r.wake()
	r.mu.Unlock()
	<-r.done
	return r.log.Close()
}
