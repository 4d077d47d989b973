package events

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrClosed is returned by Publish once the stream is closed.
var ErrClosed = errors.New("the event stream is closed")

// Publisher accepts events into the stream. It is what the informer
// adapters need.
type Publisher interface {
	// Publish assigns ev the next sequence number and enqueues it, blocking
	// while the stream is full. It returns the sequence number assigned.
	Publish(ctx context.Context, ev Event) (uint64, error)
}

// Stream is a bounded queue of events with many publishers and exactly one
// consumer. Sequence numbers are assigned in the order events are accepted,
// without gaps: an event that is not accepted (context canceled, stream
// closed) takes no number.
type Stream struct {
	ch        chan Event
	lock      chan struct{} // a mutex usable in select: orders publishers
	done      chan struct{} // closed by Close
	closed    atomic.Bool
	consuming atomic.Bool
	next      uint64 // guarded by lock
}

// NewStream returns a stream that holds at most capacity events (at least
// 1) and numbers the first event it accepts next; pass the last sequence
// number of the log plus one when resuming one, or 1.
func NewStream(capacity int, next uint64) *Stream {
	if capacity < 1 {
		capacity = 1
	}
	if next == 0 {
		next = 1
	}
	return &Stream{
		ch:   make(chan Event, capacity),
		lock: make(chan struct{}, 1),
		done: make(chan struct{}),
		next: next,
	}
}

// Publish implements Publisher. The event's own Seq is ignored.
func (s *Stream) Publish(ctx context.Context, ev Event) (uint64, error) {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.done:
		return 0, ErrClosed
	}
	defer func() { <-s.lock }()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	ev.Seq = s.next
	select {
	case s.ch <- ev:
		s.next++
		return ev.Seq, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.done:
		return 0, ErrClosed
	}
}

// Consume hands every event, in sequence order, to fn on the calling
// goroutine. It returns fn's first error, the context's error once ctx is
// done, or nil once the stream is closed and every accepted event has been
// handed over. A stream has exactly one consumer: a second call returns an
// error at once.
func (s *Stream) Consume(ctx context.Context, fn func(Event) error) error {
	if !s.consuming.CompareAndSwap(false, true) {
		return errors.New("the event stream already has a consumer: exactly one goroutine may apply events")
	}
	for {
		select {
		case ev := <-s.ch:
			if err := fn(ev); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return s.drain(ctx, fn)
		}
	}
}

// drain hands over what was accepted before Close. Holding the publishers'
// lock guarantees no publisher is between its check and its send.
func (s *Stream) drain(ctx context.Context, fn func(Event) error) error {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.lock }()
	for {
		select {
		case ev := <-s.ch:
			if err := fn(ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// Close stops accepting events. The consumer still receives those accepted
// before. Close may be called more than once.
func (s *Stream) Close() {
	if s.closed.CompareAndSwap(false, true) {
		close(s.done)
	}
}

// Len is the number of events waiting for the consumer: the stream's depth.
func (s *Stream) Len() int { return len(s.ch) }

// Cap is the most events the stream holds before Publish blocks.
func (s *Stream) Cap() int { return cap(s.ch) }
