package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"

	"ome.io/quota-manager/events"
)

// Problem is damage found in a log: a torn or corrupt record, an unreadable
// segment, or a gap in the sequence. Reading carries on after it.
type Problem struct {
	// Segment is the segment's file name; Offset the byte where the damage
	// starts in it (0 for a problem with the whole file, or a gap).
	Segment string
	Offset  int64
	Message string
}

func (p Problem) String() string {
	if p.Segment == "" {
		return p.Message
	}
	return fmt.Sprintf("segment %s offset %d: %s", p.Segment, p.Offset, p.Message)
}

// Report sums up a read.
type Report struct {
	Segments int
	Events   int
	// First and Last are the sequence numbers of the first and last event
	// delivered; 0 when none was.
	First, Last uint64
	Problems    []Problem
}

// Read delivers every readable event of the log in dir to fn, in order,
// starting at sequence number from (0 or 1: from the start). Damage is
// reported in the Report's Problems and skipped as the package comment
// says. It stops with an error when fn returns one, when the folder cannot
// be read, or at a segment or event newer than this build reads.
func Read(dir string, from uint64, fn func(events.Event) error) (Report, error) {
	var rep Report
	err := scan(dir, from, &rep, func(payload []byte, seg string, off int64) (uint64, error) {
		ev, err := events.Unmarshal(payload)
		if err != nil {
			var ve *events.VersionError
			if errors.As(err, &ve) && ve.Version > events.SchemaVersion {
				return 0, fmt.Errorf("segment %s offset %d: %w", seg, off, err)
			}
			return 0, errBadPayload{err}
		}
		if ev.Seq < from {
			return ev.Seq, errSkip
		}
		if err := fn(ev); err != nil {
			return ev.Seq, errStop{err}
		}
		return ev.Seq, nil
	})
	return rep, err
}

// errSkip marks a record before the requested start.
var errSkip = errors.New("before the start")

// errBadPayload is a record whose checksum holds but whose event does not
// decode: reported as a problem, like a checksum failure.
type errBadPayload struct{ err error }

func (e errBadPayload) Error() string { return e.err.Error() }

// errStop carries the callback's own error out of scan unchanged.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// scan walks every segment of dir. visit decodes one payload and returns
// its sequence number.
func scan(dir string, from uint64, rep *Report, visit func(payload []byte, seg string, off int64) (uint64, error)) error {
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	// Segments wholly before from are skipped unread: the next one starts
	// at or before from.
	start := 0
	for i := range segs {
		if i+1 < len(segs) && segs[i+1].first <= from {
			start = i + 1
		}
	}
	var last uint64 // last sequence number seen, delivered or skipped
	for _, sf := range segs[start:] {
		rep.Segments++
		if last != 0 && sf.first != last+1 {
			if sf.first > last+1 {
				rep.Problems = append(rep.Problems, Problem{Message: fmt.Sprintf("events %d to %d are missing before segment %s", last+1, sf.first-1, sf.name)})
			} else {
				rep.Problems = append(rep.Problems, Problem{Segment: sf.name, Message: fmt.Sprintf("the segment starts at event %d, but event %d was already read: it overlaps the segment before it", sf.first, last)})
			}
		}
		var segLast uint64 // within this segment
		_, err := scanSegment(sf, func(payload []byte, off int64) error {
			seq, err := visit(payload, sf.name, off)
			if err != nil && !errors.Is(err, errSkip) {
				return err
			}
			if segLast != 0 && seq > segLast+1 {
				// A record skipped for damage: its events are missing.
				rep.Problems = append(rep.Problems, Problem{Segment: sf.name, Offset: off, Message: fmt.Sprintf("events %d to %d are missing before this record", segLast+1, seq-1)})
			}
			segLast = seq
			if err == nil {
				if rep.First == 0 {
					rep.First = seq
				}
				rep.Last = seq
				rep.Events++
			}
			last = seq
			return nil
		})
		if err != nil {
			var p *Problem
			var ps *Problems
			var stop errStop
			switch {
			case errors.As(err, &ps):
				for _, p := range ps.list {
					rep.Problems = append(rep.Problems, *p)
				}
			case errors.As(err, &p):
				rep.Problems = append(rep.Problems, *p)
			case errors.As(err, &stop):
				return stop.err
			default:
				return err
			}
		}
	}
	return nil
}

// scanSegment reads one segment's records and hands each payload to fn. It
// returns how many records it read; damage comes back as a *Problem.
func scanSegment(sf segmentFile, fn func(payload []byte, off int64) error) (int, error) {
	f, err := os.Open(sf.path)
	if err != nil {
		return 0, &Problem{Segment: sf.name, Message: fmt.Sprintf("cannot open: %v", err)}
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	hb := make([]byte, headerSize)
	if n, err := io.ReadFull(r, hb); err != nil {
		_, herr := decodeHeader(sf.name, hb[:n])
		return 0, &Problem{Segment: sf.name, Message: herr.Error()}
	}
	h, err := decodeHeader(sf.name, hb)
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			return 0, err
		}
		return 0, &Problem{Segment: sf.name, Message: err.Error()}
	}
	if h.schema > events.SchemaVersion {
		return 0, fmt.Errorf("segment %s was written with events schema version %d, newer than %d, the newest this build reads: read the log with the ome-quota-manager version that wrote it, or a newer one",
			sf.name, h.schema, events.SchemaVersion)
	}
	if h.first != sf.first {
		return 0, &Problem{Segment: sf.name, Message: fmt.Sprintf("the header says the first event is %d but the file name says %d: the file was renamed", h.first, sf.first)}
	}
	off := int64(headerSize)
	var head [recordHead]byte
	buf := make([]byte, 0, 4096)
	count := 0
	var problems []*Problem
	// skip reports the damage at off and goes on at the next record that
	// checks; false when none follows.
	skip := func(what string) (bool, error) {
		next, ok := resync(f, off+1)
		p := &Problem{Segment: sf.name, Offset: off}
		if !ok {
			p.Message = what + "; no sound record follows it in this segment"
			problems = append(problems, p)
			return false, nil
		}
		p.Message = fmt.Sprintf("%s; %d bytes are skipped and reading goes on at offset %d, the next record that checks", what, next-off, next)
		problems = append(problems, p)
		if _, err := f.Seek(next, io.SeekStart); err != nil {
			return false, err
		}
		r.Reset(f)
		off = next
		return true, nil
	}
	done := func(err error) (int, error) {
		if err != nil {
			return count, err
		}
		if len(problems) == 0 {
			return count, nil
		}
		return count, &Problems{list: problems}
	}
	for {
		n, err := io.ReadFull(r, head[:])
		if err == io.EOF {
			return done(nil)
		}
		if err != nil {
			problems = append(problems, &Problem{Segment: sf.name, Offset: off, Message: fmt.Sprintf("torn record: the segment ends %d bytes into a record header (the writer stopped mid-write); the rest of this segment is skipped", n)})
			return done(nil)
		}
		size := binary.LittleEndian.Uint32(head[0:])
		sum := binary.LittleEndian.Uint32(head[4:])
		if size > MaxRecordBytes {
			if ok, err := skip(fmt.Sprintf("corrupt record: its length reads %d bytes, more than the %d a record may have", size, MaxRecordBytes)); !ok || err != nil {
				return done(err)
			}
			continue
		}
		if cap(buf) < int(size) {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		if n, err := io.ReadFull(r, buf); err != nil {
			problems = append(problems, &Problem{Segment: sf.name, Offset: off, Message: fmt.Sprintf("torn record: the segment ends %d bytes into a record of %d bytes (the writer stopped mid-write); the rest of this segment is skipped", n, size)})
			return done(nil)
		}
		if got := crc32.Checksum(buf, crcTab); got != sum {
			if ok, err := skip(fmt.Sprintf("corrupt record: it fails its checksum (stored %08x, computed %08x)", sum, got)); !ok || err != nil {
				return done(err)
			}
			continue
		}
		if err := fn(buf, off); err != nil {
			var bad errBadPayload
			if !errors.As(err, &bad) {
				return done(err)
			}
			if ok, err := skip(fmt.Sprintf("the record's checksum holds but its event does not decode: %v", bad.err)); !ok || err != nil {
				return done(err)
			}
			continue
		}
		count++
		off += recordHead + int64(size)
	}
}

// resync finds the first offset at or after from where a whole record
// starts whose checksum holds: where reading can go on after damage. It
// reads the rest of the segment into memory, which only damage costs.
func resync(f *os.File, from int64) (int64, bool) {
	info, err := f.Stat()
	if err != nil || from >= info.Size() {
		return 0, false
	}
	rest := make([]byte, info.Size()-from)
	if _, err := f.ReadAt(rest, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, false
	}
	for i := 0; i+recordHead <= len(rest); i++ {
		size := int(binary.LittleEndian.Uint32(rest[i:]))
		if size == 0 || size > MaxRecordBytes || i+recordHead+size > len(rest) {
			continue
		}
		payload := rest[i+recordHead : i+recordHead+size]
		if crc32.Checksum(payload, crcTab) == binary.LittleEndian.Uint32(rest[i+4:]) {
			return from + int64(i), true
		}
	}
	return 0, false
}

// Problems is more than one Problem of one segment, as an error.
type Problems struct{ list []*Problem }

func (p *Problems) Error() string {
	out := make([]string, len(p.list))
	for i, q := range p.list {
		out[i] = q.String()
	}
	return strings.Join(out, "; ")
}

// Error lets a *Problem travel as an error inside this package.
func (p *Problem) Error() string { return p.String() }
