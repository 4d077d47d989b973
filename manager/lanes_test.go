package manager

import (
	"context"
	"runtime"
	"testing"
)

// Both lanes draw from the one bucket: together they never exceed the
// burst the operator set.
func TestLanesShareOneBucket(t *testing.T) {
	l := newLanes(0.001, 3)
	bulk, urgent := lane{l: l}, lane{l: l, urgent: true}
	for i, ok := range []bool{urgent.TryAccept(), bulk.TryAccept(), urgent.TryAccept()} {
		if !ok {
			t.Fatalf("token %d of a burst of 3 refused", i+1)
		}
	}
	if bulk.TryAccept() || urgent.TryAccept() {
		t.Fatal("a fourth token granted from a burst of 3: the lanes do not share the bucket")
	}
	if bulk.QPS() != 0.001 || urgent.QPS() != 0.001 {
		t.Fatalf("QPS %g and %g, want the bucket's 0.001", bulk.QPS(), urgent.QPS())
	}
}

// An urgent request arriving behind five waiting bulk requests gets its
// token after at most the one bulk reservation ahead of it, not after all
// five (a plain token bucket serves them in the order they reserved).
func TestUrgentLaneOvertakesBulk(t *testing.T) {
	l := newLanes(20, 1)
	bulk, urgent := lane{l: l}, lane{l: l, urgent: true}
	if !bulk.TryAccept() {
		t.Fatal("the burst token was refused")
	}
	ctx := context.Background()
	done := make(chan string, 6)
	for range 5 {
		go func() {
			if err := bulk.Wait(ctx); err != nil {
				t.Error(err)
			}
			done <- "bulk"
		}()
	}
	for l.bulkWaiting.Load() < 5 {
		runtime.Gosched() // until all five wait (one holds the bulk reservation)
	}
	go func() {
		if err := urgent.Wait(ctx); err != nil {
			t.Error(err)
		}
		done <- "urgent"
	}()
	var order []string
	for range 6 {
		order = append(order, <-done)
	}
	for i, w := range order {
		if w == "urgent" {
			if i > 1 {
				t.Fatalf("urgent served after %d bulk requests, want at most 1: %v", i, order)
			}
			return
		}
	}
}
