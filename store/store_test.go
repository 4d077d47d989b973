package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/events"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// sample is the i-th event of a test log: Nodes with GPUs, and a tick now
// and then, numbered from seq.
func sample(seq uint64) events.Event {
	var ev events.Event
	if seq%10 == 0 {
		ev = events.Tick(t0.Add(time.Duration(seq) * time.Second))
	} else {
		ev = events.NodeUpserted(t0.Add(time.Duration(seq)*time.Second), &events.Node{
			Name:        fmt.Sprintf("gpu-node-%d", seq%97),
			Labels:      map[string]string{"gpu.product": "a100"},
			Capacity:    map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")},
			Allocatable: map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")},
			Ready:       true,
		})
	}
	ev.Seq = seq
	return ev
}

func write(t testing.TB, dir string, o Options, from, to uint64) {
	t.Helper()
	l, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.NextSeq(); got != from {
		t.Fatalf("NextSeq = %d, want %d", got, from)
	}
	for s := from; s <= to; s++ {
		if err := l.Append(sample(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, dir string, from uint64) ([]uint64, Report) {
	t.Helper()
	var seqs []uint64
	rep, err := Read(dir, from, func(ev events.Event) error {
		want, _ := events.Marshal(sample(ev.Seq))
		got, _ := events.Marshal(ev)
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d read back as %s, want %s", ev.Seq, got, want)
		}
		seqs = append(seqs, ev.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs, rep
}

func span(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func equalSeqs(t *testing.T, got, want []uint64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d events (%v...), want %d", len(got), head(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d read is seq %d, want %d", i, got[i], want[i])
		}
	}
}

func head(s []uint64) []uint64 { return s[:min(len(s), 5)] }

var small = Options{MaxSegmentBytes: 4 << 10, MaxBytes: -1, Sync: SyncNever}

func TestRoundTripAcrossSegmentsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, small, 1, 300)
	// A restart continues the sequence with no gap, in the same folder.
	write(t, dir, small, 301, 500)
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 10 {
		t.Fatalf("%d segments for 500 events of about 200 bytes in 4KiB segments: rotation did not happen", len(segs))
	}
	for _, s := range segs {
		if s.size > small.MaxSegmentBytes {
			t.Errorf("segment %s is %d bytes, above the %d bound", s.name, s.size, small.MaxSegmentBytes)
		}
	}
	seqs, rep := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 500))
	if len(rep.Problems) != 0 || rep.First != 1 || rep.Last != 500 || rep.Events != 500 {
		t.Fatalf("report %+v", rep)
	}
	// Reading from the middle skips the earlier segments.
	seqs, rep = readAll(t, dir, 250)
	equalSeqs(t, seqs, span(250, 500))
	if rep.Segments >= len(segs) {
		t.Errorf("a read from 250 opened %d of %d segments", rep.Segments, len(segs))
	}
}

func TestAppendRefusesAnOutOfOrderEvent(t *testing.T) {
	l, err := Open(t.TempDir(), small)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(sample(1)); err != nil {
		t.Fatal(err)
	}
	err = l.Append(sample(3))
	if err == nil || !strings.Contains(err.Error(), "where event 2 was expected") {
		t.Fatalf("appending seq 3 after 1: %v", err)
	}
}

func lastSegment(t *testing.T, dir string) segmentFile {
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return segs[len(segs)-1]
}

// recordOffsets lists the offsets of a segment's records.
func recordOffsets(t *testing.T, path string) []int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(headerSize); off < int64(len(b)); {
		offs = append(offs, off)
		off += recordHead + int64(binary.LittleEndian.Uint32(b[off:]))
	}
	return offs
}

func TestTornLastRecord(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, small, 1, 100)
	last := lastSegment(t, dir)
	offs := recordOffsets(t, last.path)
	if err := os.Truncate(last.path, last.size-1); err != nil {
		t.Fatal(err)
	}
	seqs, rep := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 99))
	if len(rep.Problems) != 1 {
		t.Fatalf("problems %v, want one", rep.Problems)
	}
	p := rep.Problems[0]
	if p.Segment != last.name || p.Offset != offs[len(offs)-1] || !strings.Contains(p.Message, "torn record") {
		t.Fatalf("problem %q, want a torn record in %s at offset %d", p, last.name, offs[len(offs)-1])
	}
	// A restart reports it, leaves the damaged segment as found, and goes
	// on from the last readable event: the lost event's number is reused,
	// so the sequence has no gap.
	l, err := Open(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Problems()) != 1 || l.NextSeq() != 100 {
		t.Fatalf("reopened: problems %v, next %d; want the torn record and 100", l.Problems(), l.NextSeq())
	}
	l.Close()
	write(t, dir, small, 100, 120)
	seqs, rep = readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 120))
	if len(rep.Problems) != 1 {
		t.Fatalf("problems %v, want only the torn record", rep.Problems)
	}
}

// damageMiddle writes events 1 to 200 in small segments, lets damage
// change the bytes of the middle segment (offs are the offsets of its
// records), writes them back and reads the whole log: the middle segment,
// its offsets, the seqs read and the report.
func damageMiddle(t *testing.T, damage func(b []byte, offs []int64)) (mid segmentFile, offs []int64, seqs []uint64, rep Report) {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, small, 1, 200)
	segs, _ := listSegments(dir)
	mid = segs[len(segs)/2]
	offs = recordOffsets(t, mid.path)
	b, _ := os.ReadFile(mid.path)
	damage(b, offs)
	if err := os.WriteFile(mid.path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	rep, err := Read(dir, 0, func(ev events.Event) error { seqs = append(seqs, ev.Seq); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return mid, offs, seqs, rep
}

func TestFlippedByteFailsItsChecksum(t *testing.T) {
	mid, offs, seqs, rep := damageMiddle(t, func(b []byte, offs []int64) {
		b[offs[len(offs)/2]+recordHead+5] ^= 0x20
	})
	bad := offs[len(offs)/2]
	// Reading goes on at the next record: only the damaged one is lost,
	// and both the damage and the gap are reported.
	if len(rep.Problems) != 2 {
		t.Fatalf("problems %v, want the checksum and the gap it leaves", rep.Problems)
	}
	badSeq := mid.first + uint64(len(offs)/2)
	next := offs[len(offs)/2+1]
	if p := rep.Problems[0]; p.Segment != mid.name || p.Offset != next || p.Message != fmt.Sprintf("events %d to %d are missing before this record", badSeq, badSeq) {
		t.Fatalf("gap problem %q", p)
	}
	want := fmt.Sprintf("reading goes on at offset %d, the next record that checks", next)
	if p := rep.Problems[1]; p.Segment != mid.name || p.Offset != bad || !strings.Contains(p.Message, "fails its checksum") || !strings.Contains(p.Message, want) {
		t.Fatalf("problem %q, want a checksum failure in %s at %d, and %q", p, mid.name, bad, want)
	}
	equalSeqs(t, seqs, append(span(1, badSeq-1), span(badSeq+1, 200)...))
}

// TestGarbageInsideASegment: bytes that are no record at all, written
// over the middle of a segment, cost the records they cover and no more.
func TestGarbageInsideASegment(t *testing.T) {
	mid, offs, seqs, rep := damageMiddle(t, func(b []byte, offs []int64) {
		from, to := offs[2]+3, offs[5]+1 // into record 3, through the start of record 6
		for i := from; i < to; i++ {
			b[i] = 0xff
		}
	})
	first := mid.first
	// Records 3 to 6 of the segment (0-based 2 to 5) are lost.
	equalSeqs(t, seqs, append(span(1, first+1), span(first+6, 200)...))
	if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[1].Message, fmt.Sprintf("reading goes on at offset %d", offs[6])) {
		t.Fatalf("problems %v", rep.Problems)
	}
}

func TestNewerVersionsAreRefused(t *testing.T) {
	t.Run("segment format", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, small, 1, 5)
		s := lastSegment(t, dir)
		b, _ := os.ReadFile(s.path)
		h := header{format: FormatVersion + 1, schema: events.SchemaVersion, first: 1}.encode()
		copy(b, h)
		_ = os.WriteFile(s.path, b, 0o640)
		_, err := Read(dir, 0, func(events.Event) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "newer than 1") || !strings.Contains(err.Error(), "read the log with the ome-quota-manager version that wrote it") {
			t.Fatalf("err = %v", err)
		}
		if _, err := Open(dir, small); err == nil {
			t.Fatal("Open appended to a log of a newer format")
		}
	})
	t.Run("events schema in the header", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, small, 1, 5)
		s := lastSegment(t, dir)
		b, _ := os.ReadFile(s.path)
		copy(b, header{format: FormatVersion, schema: events.SchemaVersion + 1, first: 1}.encode())
		_ = os.WriteFile(s.path, b, 0o640)
		_, err := Read(dir, 0, func(events.Event) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "events schema version") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("an event of a newer schema", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, small, 1, 5)
		s := lastSegment(t, dir)
		f, _ := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0)
		_, _ = f.Write(appendRecord(nil, []byte(fmt.Sprintf(`{"v":%d,"seq":6,"kind":"Tick"}`, events.SchemaVersion+1))))
		f.Close()
		n := 0
		_, err := Read(dir, 0, func(events.Event) error { n++; return nil })
		if err == nil || !strings.Contains(err.Error(), "newer than") || !strings.Contains(err.Error(), s.name) {
			t.Fatalf("err = %v", err)
		}
		if n != 5 {
			t.Fatalf("%d events delivered before the newer one, want 5", n)
		}
	})
}

func TestRetention(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		dir := t.TempDir()
		o := small
		o.MaxBytes = 16 << 10
		write(t, dir, o, 1, 1000)
		segs, _ := listSegments(dir)
		var total int64
		for _, s := range segs {
			total += s.size
		}
		if total > o.MaxBytes+o.MaxSegmentBytes {
			t.Fatalf("%d bytes kept, bound %d", total, o.MaxBytes)
		}
		seqs, rep := readAll(t, dir, 0)
		if len(rep.Problems) != 0 || seqs[len(seqs)-1] != 1000 || seqs[0] != segs[0].first {
			t.Fatalf("after retention: first %d last %d, problems %v", seqs[0], seqs[len(seqs)-1], rep.Problems)
		}
		// The sequence still continues after the retained tail.
		write(t, dir, o, 1001, 1002)
	})
	t.Run("age", func(t *testing.T) {
		dir := t.TempDir()
		now := t0
		o := small
		o.MaxAge = time.Hour
		o.Now = func() time.Time { return now }
		write(t, dir, o, 1, 100)
		segs, _ := listSegments(dir)
		old := t0.Add(-2 * time.Hour)
		for _, s := range segs[:len(segs)-1] {
			_ = os.Chtimes(s.path, old, old)
		}
		_ = os.Chtimes(segs[len(segs)-1].path, t0, t0)
		write(t, dir, o, 101, 200)
		left, _ := listSegments(dir)
		if left[0].first != segs[len(segs)-1].first {
			t.Fatalf("oldest kept segment starts at %d, want %d (the first one younger than an hour)", left[0].first, segs[len(segs)-1].first)
		}
	})
}

func TestAnEmptyDamagedSegmentIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, small, 1, 10)
	// A segment cut off while its header was written, as a crash at
	// rotation leaves it.
	name := filepath.Join(dir, segmentName(11))
	_ = os.WriteFile(name, magic[:5], 0o640)
	l, err := Open(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	if l.NextSeq() != 11 || len(l.Problems()) != 2 {
		t.Fatalf("next %d problems %v", l.NextSeq(), l.Problems())
	}
	l.Close()
	if _, err := os.Stat(name + ".damaged"); err != nil {
		t.Fatal(err)
	}
	write(t, dir, small, 11, 12)
	seqs, rep := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 12))
	if len(rep.Problems) != 0 {
		t.Fatalf("problems %v", rep.Problems)
	}
}

func TestSyncPolicies(t *testing.T) {
	for _, p := range []SyncPolicy{SyncAlways, SyncInterval, SyncNever} {
		dir := t.TempDir()
		write(t, dir, Options{Sync: p, SyncInterval: 10 * time.Millisecond}, 1, 50)
		seqs, _ := readAll(t, dir, 0)
		equalSeqs(t, seqs, span(1, 50))
	}
	if _, err := Open(t.TempDir(), Options{Sync: "sometimes"}); err == nil || !strings.Contains(err.Error(), `"sometimes"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestOneWriterPerFolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, small); err == nil || !strings.Contains(err.Error(), "another process is writing the event log") {
		t.Fatalf("a second writer: %v", err)
	}
	l.Close()
	l2, err := Open(dir, small)
	if err != nil {
		t.Fatalf("after Close the folder must open again: %v", err)
	}
	l2.Close()
}

// A log written by a build of an older events schema is read, and a newer
// build continues it in a new segment, whose header names its schema.
func TestOlderSchemaSegmentIsNotContinued(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, small, 1, 5)
	s := lastSegment(t, dir)
	b, _ := os.ReadFile(s.path)
	copy(b, header{format: FormatVersion, schema: events.SchemaVersion - 1, first: 1}.encode())
	if err := os.WriteFile(s.path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	write(t, dir, small, 6, 10)
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 2 || segs[1].first != 6 {
		t.Fatalf("segments %+v, want a new one from 6", segs)
	}
	seqs, rep := readAll(t, dir, 0)
	equalSeqs(t, seqs, span(1, 10))
	if len(rep.Problems) != 0 {
		t.Errorf("problems: %v", rep.Problems)
	}
}
