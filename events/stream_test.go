package events

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestStreamSequencesWithoutGaps(t *testing.T) {
	s := NewStream(4, 10)
	const publishers, each = 8, 200
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.Publish(context.Background(), Tick(t0.Add(time.Duration(p)))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); s.Close() }()
	want := uint64(10)
	err := s.Consume(context.Background(), func(ev Event) error {
		if ev.Seq != want {
			t.Fatalf("got seq %d, want %d", ev.Seq, want)
		}
		want++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := want - 10; got != publishers*each {
		t.Errorf("consumed %d events, want %d", got, publishers*each)
	}
}

func TestStreamBackPressure(t *testing.T) {
	s := NewStream(2, 1)
	ctx := context.Background()
	for range 2 {
		if _, err := s.Publish(ctx, Tick(t0)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 2 || s.Cap() != 2 {
		t.Fatalf("len %d cap %d, want 2 and 2", s.Len(), s.Cap())
	}
	// Full: Publish blocks until its context gives up, and takes no number.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Publish(short, Tick(t0)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	// A blocked publisher proceeds as soon as the consumer takes one.
	got := make(chan uint64)
	go func() {
		seq, err := s.Publish(ctx, Tick(t0))
		if err != nil {
			t.Error(err)
		}
		got <- seq
	}()
	select {
	case seq := <-got:
		t.Fatalf("publish of #%d did not block on a full stream", seq)
	case <-time.After(20 * time.Millisecond):
	}
	seen := make(chan uint64, 3)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- s.Consume(cctx, func(ev Event) error { seen <- ev.Seq; return nil })
	}()
	if seq := <-got; seq != 3 {
		t.Errorf("blocked publisher got seq %d, want 3 (no gap for the one that gave up)", seq)
	}
	for want := uint64(1); want <= 3; want++ {
		if seq := <-seen; seq != want {
			t.Errorf("consumed %d, want %d", seq, want)
		}
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("consume returned %v, want context.Canceled", err)
	}
}

func TestStreamOneConsumer(t *testing.T) {
	s := NewStream(1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		close(started)
		done <- s.Consume(ctx, func(Event) error { return nil })
	}()
	<-started
	// The first consumer may not have claimed the stream yet; claim it for sure.
	for !s.consuming.Load() {
		time.Sleep(time.Millisecond)
	}
	if err := s.Consume(ctx, func(Event) error { return nil }); err == nil {
		t.Error("a second consumer was accepted")
	}
	cancel()
	<-done
}

func TestStreamCloseDrains(t *testing.T) {
	s := NewStream(8, 1)
	ctx := context.Background()
	for range 5 {
		if _, err := s.Publish(ctx, Tick(t0)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s.Close()
	if _, err := s.Publish(ctx, Tick(t0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close: %v, want ErrClosed", err)
	}
	n := 0
	if err := s.Consume(ctx, func(Event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("drained %d events, want 5", n)
	}
}

func TestStreamConsumerError(t *testing.T) {
	s := NewStream(2, 1)
	if _, err := s.Publish(context.Background(), Tick(t0)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("log full")
	if err := s.Consume(context.Background(), func(Event) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("got %v, want the handler's error", err)
	}
}

func TestStreamCloseUnblocksPublisher(t *testing.T) {
	s := NewStream(1, 1)
	if _, err := s.Publish(context.Background(), Tick(t0)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := s.Publish(context.Background(), Tick(t0))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	s.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("blocked publisher got %v, want ErrClosed", err)
	}
}
