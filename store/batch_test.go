package store

import (
	"strings"
	"sync"
	"testing"
	"time"

	"ome.io/quota-manager/events"
)

// A batch spanning several segments reads back whole and in order, and a
// batch that skips a number stops there, with what came before it in the
// log.
func TestAppendBatch(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for s := uint64(1); s <= 300; s++ {
		evs = append(evs, sample(s))
	}
	if n, err := l.AppendBatch(evs[:1]); n != 1 || err != nil {
		t.Fatalf("AppendBatch of one: %d, %v", n, err)
	}
	if n, err := l.AppendBatch(evs[1:]); n != 299 || err != nil {
		t.Fatalf("AppendBatch: %d, %v", n, err)
	}
	bad := []events.Event{sample(301), sample(303)}
	n, err := l.AppendBatch(bad)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "where event 302 was expected") {
		t.Fatalf("a batch with a gap: %d, %v", n, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := listSegments(dir)
	if len(segs) < 5 {
		t.Errorf("%d segments, want the batch rotated through several of 4KiB", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		if s.size > small.MaxSegmentBytes {
			t.Errorf("segment %s is %d bytes, over the bound", s.name, s.size)
		}
	}
	seqs, rep := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 301))
	if len(rep.Problems) != 0 {
		t.Errorf("problems: %v", rep.Problems)
	}
}

// The recorder writes what it is handed, in order, through batches, and
// Wait returns once an event is in the log.
func TestRecorderBatches(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(l, 64, func(ev events.Event, err error) { t.Errorf("%s: %v", ev, err) })
	for s := uint64(1); s <= 2000; s++ {
		r.Record(sample(s))
	}
	r.Wait(2000)
	if got := l.NextSeq(); got != 2001 {
		t.Errorf("after Wait(2000) the log's next event is %d", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	seqs, _ := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 2000))
}

// Recorded events reach the log by themselves, with nobody waiting for
// them: after one event on an idle recorder, and after a run of events
// that stops short of the wake-up mark. Close writes what is still queued.
func TestRecorderWritesWithoutWait(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(l, 64, func(ev events.Event, err error) { t.Errorf("%s: %v", ev, err) })
	reaches := func(next uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for l.NextSeq() != next {
			if time.Now().After(deadline) {
				t.Fatalf("the log's next event is %d, want %d: recorded events were not written", l.NextSeq(), next)
			}
			time.Sleep(time.Millisecond)
		}
	}
	r.Record(sample(1))
	reaches(2)
	for s := uint64(2); s <= 20; s++ { // under depth/2: no wake-up by size
		r.Record(sample(s))
	}
	reaches(21)
	for s := uint64(21); s <= 25; s++ {
		r.Record(sample(s))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	seqs, _ := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 25))
}

// Wait from other goroutines while events keep coming returns once its
// event is in the log, and never before.
func TestRecorderWaitWhileRecording(t *testing.T) {
	l, err := Open(t.TempDir(), small)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(l, 16, func(ev events.Event, err error) { t.Errorf("%s: %v", ev, err) })
	var wg sync.WaitGroup
	for _, seq := range []uint64{1, 7, 100, 999, 1000} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Wait(seq)
			if got := l.NextSeq(); got <= seq {
				t.Errorf("Wait(%d) returned with the log's next event %d", seq, got)
			}
		}()
	}
	for s := uint64(1); s <= 1000; s++ {
		r.Record(sample(s))
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
