package store

import (
	"strings"
	"testing"

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
