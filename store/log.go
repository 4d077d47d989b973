package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"ome.io/quota-manager/events"
)

// SyncPolicy says when appended records are forced to stable storage.
// Every append is written to the file at once whatever the policy, so a
// process that is killed loses nothing it appended; the policy bounds only
// what a crash of the whole machine (or its power) may lose.
type SyncPolicy string

const (
	// SyncAlways calls fsync after every append: nothing is lost, at the
	// price of a disk flush per event.
	SyncAlways SyncPolicy = "always"
	// SyncInterval calls fsync at most once per Options.SyncInterval while
	// appends are pending, on rotation and on Close: a machine crash loses
	// at most that interval's events. The default.
	SyncInterval SyncPolicy = "interval"
	// SyncNever leaves flushing to the operating system (and Close).
	SyncNever SyncPolicy = "never"
)

// Options bound a log. Zero values take the defaults named.
type Options struct {
	// MaxSegmentBytes rotates to a new segment once the active one would
	// grow past it (default 64 MiB, at least 4 KiB).
	MaxSegmentBytes int64
	// MaxBytes removes the oldest whole segments while the log is larger
	// (default 1 GiB; negative: no bound).
	MaxBytes int64
	// MaxAge removes whole segments whose last write is older (default 0:
	// no bound).
	MaxAge time.Duration
	// Sync is the fsync policy (default SyncInterval) and SyncInterval its
	// period (default 1 s).
	Sync         SyncPolicy
	SyncInterval time.Duration
	// Now is the clock that ages segments (default time.Now).
	Now func() time.Time
	// OnSyncError, when set, is told of each failed periodic sync
	// (SyncInterval), from the flusher's goroutine; the log then starts a
	// new segment at the next event, and readers report the gap.
	OnSyncError func(error)
}

// Check reports the first thing wrong with o.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

// Defaults of Options.
const (
	DefaultMaxSegmentBytes = 64 << 20
	DefaultMaxBytes        = 1 << 30
	DefaultSyncInterval    = time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.MaxSegmentBytes == 0 {
		o.MaxSegmentBytes = DefaultMaxSegmentBytes
		if o.MaxBytes > 0 {
			// A small log keeps at least four segments, so that retention
			// removes a quarter of it at a time, not all of it.
			o.MaxSegmentBytes = max(min(o.MaxSegmentBytes, o.MaxBytes/4), 4<<10)
		}
	}
	if o.MaxSegmentBytes < 4<<10 {
		return o, fmt.Errorf("the event log's segment size must be at least 4KiB, got %d bytes", o.MaxSegmentBytes)
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxBytes > 0 && o.MaxBytes < o.MaxSegmentBytes {
		return o, fmt.Errorf("the event log's size bound (%d bytes) must be at least one segment (%d bytes)", o.MaxBytes, o.MaxSegmentBytes)
	}
	if o.MaxAge < 0 {
		return o, fmt.Errorf("the event log's age bound must not be negative, got %s", o.MaxAge)
	}
	switch o.Sync {
	case "":
		o.Sync = SyncInterval
	case SyncAlways, SyncInterval, SyncNever:
	default:
		return o, fmt.Errorf("event log sync policy %q is not one of %q, %q, %q", o.Sync, SyncAlways, SyncInterval, SyncNever)
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// Log is an event log open for appending. Append and Close may be called
// from one goroutine while a background flusher syncs.
type Log struct {
	dir  string
	opts Options

	mu       sync.Mutex
	segs     []segmentFile // oldest first; the last is active
	f        *os.File      // the active segment
	next     uint64
	dirty    bool
	problems []Problem
	buf      []byte
	// broken is set after a failed write: the next append starts a new
	// segment at its own sequence number, and readers report the gap.
	broken bool
	// After a failed start of a segment, the next try waits until retryAt
	// (backoff doubles from 100 ms to 30 s), refusing events with lastErr
	// meanwhile: a full disk is not hit with a create per event.
	retryAt time.Time
	backoff time.Duration
	lastErr error
	closed  bool
	stop    chan struct{}
	done    chan struct{}
	lock    *os.File // holds the folder's flock while open
}

// Open opens (creating it if needed) the log in dir. The next event it
// takes is the one after the last readable event already there, or 1 in an
// empty folder. Damage found at the end of the log is in Problems; new
// events then go to a new segment, so that the damaged one stays as it was
// found.
func Open(dir string, o Options) (*Log, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the event log folder: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	l := &Log{dir: dir, opts: opts, segs: segs, next: 1, lock: lock}
	damaged := false
	// The last sequence number: from the newest segment that holds a
	// readable event.
	for i := len(segs) - 1; i >= 0; i-- {
		var last uint64
		_, err := scanSegment(segs[i], func(payload []byte, _ int64) error {
			ev, err := events.Unmarshal(payload)
			if err != nil {
				return errBadPayload{err}
			}
			last = ev.Seq
			return nil
		})
		if err != nil {
			var p *Problem
			var ps *Problems
			switch {
			case errors.As(err, &ps):
				for _, p := range ps.list {
					l.problems = append(l.problems, *p)
				}
			case errors.As(err, &p):
				l.problems = append(l.problems, *p)
			default:
				return nil, err
			}
			if i == len(segs)-1 {
				damaged = true
			}
		}
		if last != 0 {
			l.next = last + 1
			break
		}
		if i == len(segs)-1 && err == nil {
			// An empty but sound active segment: its name is the next seq.
			l.next = segs[i].first
			break
		}
	}
	if n := len(segs); n > 0 && damaged && segs[n-1].first == l.next {
		// The damaged segment holds no readable event and has the name the
		// next segment needs: keep it beside the log, out of its way.
		aside := segs[n-1].path + ".damaged"
		if err := os.Rename(segs[n-1].path, aside); err != nil {
			return nil, fmt.Errorf("moving the damaged segment %s aside: %w", segs[n-1].name, err)
		}
		l.problems = append(l.problems, Problem{Segment: segs[n-1].name, Message: "the segment holds no readable event; it was renamed to " + filepath.Base(aside) + " and a new one started"})
		l.segs = segs[:n-1]
	}
	if len(segs) > 0 && !damaged && segs[len(segs)-1].first <= l.next && sameSchema(segs[len(segs)-1]) {
		if err := l.openActive(segs[len(segs)-1]); err != nil {
			return nil, err
		}
	} else if err := l.rotate(); err != nil {
		return nil, err
	}
	if opts.Sync == SyncInterval {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.flusher()
	}
	ok = true
	return l, nil
}

// NextSeq is the sequence number the next appended event must carry.
func (l *Log) NextSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Problems is the damage Open found.
func (l *Log) Problems() []Problem { return l.problems }

// Dir is the log's folder.
func (l *Log) Dir() string { return l.dir }

// sameSchema reports whether the segment's header names the schema this
// build writes: a segment of an older schema is left as it is, and new
// events go to a new segment, so that each header tells the truth.
func sameSchema(sf segmentFile) bool {
	f, err := os.Open(sf.path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, headerSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return false
	}
	h, err := decodeHeader(sf.name, b)
	return err == nil && h.schema == events.SchemaVersion
}

func (l *Log) openActive(sf segmentFile) error {
	f, err := os.OpenFile(sf.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("opening the event log segment %s: %w", sf.name, err)
	}
	l.f = f
	return nil
}

// restart starts a new segment after a failure, unless the backoff of a
// failed start has not passed. Called with mu held.
func (l *Log) restart() error {
	if now := l.opts.Now(); now.Before(l.retryAt) {
		return fmt.Errorf("the event log tries again to start a segment in %s, after: %w", l.retryAt.Sub(now).Round(time.Millisecond), l.lastErr)
	}
	if err := l.rotate(); err != nil {
		return l.failedStart(err)
	}
	l.broken, l.backoff = false, 0
	return nil
}

// failedStart marks the log broken after err failed to start a segment,
// and sets when the next try may come.
func (l *Log) failedStart(err error) error {
	l.broken, l.lastErr = true, err
	l.backoff = min(max(2*l.backoff, 100*time.Millisecond), 30*time.Second)
	l.retryAt = l.opts.Now().Add(l.backoff)
	return err
}

// rotate closes the active segment and starts one for l.next, then applies
// retention. Called with mu held (or before the log is shared).
func (l *Log) rotate() error {
	if l.f != nil {
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("syncing the event log before rotating: %w", err)
		}
		if err := l.f.Close(); err != nil {
			return err
		}
		l.f = nil
		l.dirty = false
	}
	name := segmentName(l.next)
	path := filepath.Join(l.dir, name)
	if info, err := os.Stat(path); err == nil && info.Size() <= headerSize {
		// A segment with no record, left by a crash while it was being
		// created: nothing of it is worth keeping.
		_ = os.Remove(path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("creating the event log segment: %w", err)
	}
	// A segment that cannot be started (a full disk) is removed, so that
	// nothing empty is left behind and the next attempt can take its name.
	abandon := func(err error) error {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	if _, err := f.Write(header{format: FormatVersion, schema: events.SchemaVersion, first: l.next}.encode()); err != nil {
		return abandon(fmt.Errorf("writing the header of event log segment %s: %w", name, err))
	}
	if err := f.Sync(); err != nil {
		return abandon(fmt.Errorf("syncing the new event log segment %s: %w", name, err))
	}
	if d, err := os.Open(l.dir); err == nil {
		_ = d.Sync() // make the new name durable
		d.Close()
	}
	l.f = f
	l.segs = append(l.segs, segmentFile{name: name, path: path, first: l.next, size: headerSize})
	return l.retain()
}

// retain removes the oldest segments beyond the size or age bound.
func (l *Log) retain() error {
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	cutoff := time.Time{}
	if l.opts.MaxAge > 0 {
		cutoff = l.opts.Now().Add(-l.opts.MaxAge)
	}
	for len(l.segs) > 1 {
		old := l.segs[0]
		tooBig := l.opts.MaxBytes > 0 && total > l.opts.MaxBytes
		tooOld := false
		if !cutoff.IsZero() {
			if info, err := os.Stat(old.path); err == nil && info.ModTime().Before(cutoff) {
				tooOld = true
			}
		}
		if !tooBig && !tooOld {
			break
		}
		if err := os.Remove(old.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing the old event log segment %s: %w", old.name, err)
		}
		total -= old.size
		l.segs = l.segs[1:]
	}
	return nil
}

// AppendBatch appends evs, which must carry NextSeq, NextSeq+1, ... in
// order, with one write per segment they go to rather than one per event:
// the recorder's way of keeping up with a burst. It returns how many were
// appended. On an error the events from evs[n] on are not in the log: a
// failed write loses the events it held (a gap that readers report, as
// with Append), and the log starts a new segment at the next event
// appended.
func (l *Log) AppendBatch(evs []events.Event) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, errors.New("the event log is closed")
	}
	buf := l.buf[:0]
	defer func() { l.buf = buf[:0] }()
	done, queued := 0, 0 // events written; events in buf after them
	var ends []int       // where each record in buf ends
	flush := func() error {
		defer func() { ends = ends[:0] }()
		if queued == 0 {
			return nil
		}
		if n, err := l.f.Write(buf); err != nil {
			kept := l.undo(n, ends)
			l.next += uint64(kept)
			done += kept
			return fmt.Errorf("appending events %d to %d to the event log: %w", evs[done].Seq, evs[done+queued-kept-1].Seq, err)
		}
		l.segs[len(l.segs)-1].size += int64(len(buf))
		l.next += uint64(queued)
		done += queued
		queued, buf = 0, buf[:0]
		return l.wrote()
	}
	for _, ev := range evs {
		if l.broken && queued == 0 && ev.Seq > l.next {
			l.next = ev.Seq
			if err := l.restart(); err != nil {
				return done, err
			}
		}
		if want := l.next + uint64(queued); ev.Seq != want {
			return done, errors.Join(flush(), fmt.Errorf("event %s appended where event %d was expected: the stream and the log disagree", ev, want))
		}
		start := len(buf)
		var err error
		if buf, err = events.AppendMarshal(append(buf, make([]byte, recordHead)...), ev); err != nil {
			buf = buf[:start]
			return done, errors.Join(flush(), err)
		}
		payload := buf[start+recordHead:]
		if len(payload) > MaxRecordBytes {
			buf = buf[:start]
			return done, errors.Join(flush(), fmt.Errorf("event %s encodes to %d bytes, more than the %d a record may hold", ev, len(payload), MaxRecordBytes))
		}
		putRecordHead(buf[start:], payload)
		active := l.segs[len(l.segs)-1].size + int64(start)
		if active > headerSize && active+int64(len(buf)-start) > l.opts.MaxSegmentBytes {
			// This record opens the next segment: write those before it.
			rec := append([]byte(nil), buf[start:]...)
			buf = buf[:start]
			if err := flush(); err != nil {
				return done, err
			}
			if err := l.rotate(); err != nil {
				return done, l.failedStart(err)
			}
			buf = append(buf, rec...)
		}
		ends = append(ends, len(buf))
		queued++
	}
	return done, flush()
}

// Append writes ev, which must carry NextSeq, as one record.
func (l *Log) Append(ev events.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("the event log is closed")
	}
	// The record is encoded in place, after room for its head, into a
	// buffer reused from one append to the next.
	buf, err := events.AppendMarshal(append(l.buf[:0], make([]byte, recordHead)...), ev)
	if err != nil {
		return err
	}
	l.buf = buf
	payload := buf[recordHead:]
	if len(payload) > MaxRecordBytes {
		return fmt.Errorf("event %s encodes to %d bytes, more than the %d a record may hold", ev, len(payload), MaxRecordBytes)
	}
	if l.broken && ev.Seq > l.next {
		l.next = ev.Seq
		if err := l.restart(); err != nil {
			return err
		}
	}
	if ev.Seq != l.next {
		return fmt.Errorf("event %s appended where event %d was expected: the stream and the log disagree", ev, l.next)
	}
	active := &l.segs[len(l.segs)-1]
	size := int64(recordHead + len(payload))
	if active.size > headerSize && active.size+size > l.opts.MaxSegmentBytes {
		if err := l.rotate(); err != nil {
			return l.failedStart(err)
		}
		active = &l.segs[len(l.segs)-1]
	}
	putRecordHead(l.buf, payload)
	if n, err := l.f.Write(l.buf); err != nil {
		if l.undo(n, []int{len(l.buf)}) == 1 {
			l.next++ // it is whole in the log after all
		}
		return fmt.Errorf("appending event %d to the event log: %w", ev.Seq, err)
	}
	active.size += size
	l.next++
	return l.wrote()
}

// undo handles a write that failed after n of its bytes, whose records
// end at ends: the segment is cut back to where the write began, so that
// no torn record is left and no event is in the log twice; the log is then
// broken, and the next event appended starts a new segment (readers report
// the gap). If the cut fails too, the records written whole stay: it
// returns how many, which the caller counts as appended. Called with mu
// held.
func (l *Log) undo(n int, ends []int) int {
	l.broken = true
	active := &l.segs[len(l.segs)-1]
	if err := l.f.Truncate(active.size); err == nil {
		return 0
	}
	whole := 0
	for whole < len(ends) && ends[whole] <= n {
		whole++
	}
	if whole > 0 {
		active.size += int64(ends[whole-1])
	}
	return whole
}

// wrote applies the sync policy after a write. Called with mu held.
func (l *Log) wrote() error {
	switch l.opts.Sync {
	case SyncAlways:
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("syncing the event log: %w", err)
		}
	case SyncInterval:
		l.dirty = true
	}
	return nil
}

// Sync forces every appended record to stable storage.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncLocked()
}

func (l *Log) syncLocked() error {
	if l.f == nil || !l.dirty {
		return nil
	}
	l.dirty = false
	if err := l.f.Sync(); err != nil {
		// What the kernel failed to write may be gone: the segment is
		// left as it is and the next event starts a new one.
		l.broken = true
		return fmt.Errorf("syncing the event log: %w", err)
	}
	return nil
}

func (l *Log) flusher() {
	defer close(l.done)
	t := time.NewTicker(l.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			err := l.syncLocked()
			l.mu.Unlock()
			if err != nil && l.opts.OnSyncError != nil {
				l.opts.OnSyncError(err)
			}
		}
	}
}

// Close syncs and closes the log.
func (l *Log) Close() error {
	if l.stop != nil {
		close(l.stop)
		<-l.done
		l.stop = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	defer l.lock.Close() // releases the flock
	if l.f == nil {
		return nil
	}
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockName is the file whose flock marks a folder as open for writing.
const lockName = "LOCK"

// lockDir takes an exclusive, non-blocking flock on dir's lock file, so
// that two processes never append to one log. The kernel releases it when
// the process dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("opening the event log's lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another process is writing the event log in %s: give each replica its own folder", dir)
		}
		return nil, fmt.Errorf("locking the event log in %s: %w", dir, err)
	}
	return f, nil
}
