package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// FormatVersion is the segment format this build writes, and the newest it
// reads.
const FormatVersion = 1

const (
	headerSize = 24
	recordHead = 8
	// MaxRecordBytes bounds one encoded event. A length above it is read as
	// corruption, not as a request to allocate that much.
	MaxRecordBytes = 16 << 20
	segmentExt     = ".seg"
)

var (
	magic  = [8]byte{'O', 'M', 'E', 'Q', 'L', 'O', 'G', 0}
	crcTab = crc32.MakeTable(crc32.Castagnoli)
)

// header is a segment's first 24 bytes.
type header struct {
	format uint16
	schema uint16
	first  uint64
}

func (h header) encode() []byte {
	b := make([]byte, headerSize)
	copy(b, magic[:])
	binary.LittleEndian.PutUint16(b[8:], h.format)
	binary.LittleEndian.PutUint16(b[10:], h.schema)
	binary.LittleEndian.PutUint64(b[12:], h.first)
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], crcTab))
	return b
}

// errNotSegment marks a header that is not a segment's at all.
var errNotSegment = errors.New("not an event log segment")

// FormatError is a segment written in a newer format than this build reads.
type FormatError struct {
	Segment string
	Format  uint16
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("segment %s has format version %d, newer than %d, the newest this build reads: read the log with the ome-quota-manager version that wrote it, or a newer one",
		e.Segment, e.Format, FormatVersion)
}

func decodeHeader(name string, b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("segment %s is %d bytes long, shorter than its %d-byte header: it was cut off while being created", name, len(b), headerSize)
	}
	if [8]byte(b[:8]) != magic {
		return header{}, fmt.Errorf("segment %s: %w (its first bytes are not %q)", name, errNotSegment, string(magic[:7]))
	}
	if got, want := binary.LittleEndian.Uint32(b[20:]), crc32.Checksum(b[:20], crcTab); got != want {
		return header{}, fmt.Errorf("segment %s: the header fails its checksum (stored %08x, computed %08x): the file is corrupt", name, got, want)
	}
	h := header{
		format: binary.LittleEndian.Uint16(b[8:]),
		schema: binary.LittleEndian.Uint16(b[10:]),
		first:  binary.LittleEndian.Uint64(b[12:]),
	}
	if h.format > FormatVersion || h.format == 0 {
		return header{}, &FormatError{Segment: name, Format: h.format}
	}
	return h, nil
}

// appendRecord appends payload's record (length, checksum, payload) to dst.
func appendRecord(dst, payload []byte) []byte {
	var head [recordHead]byte
	putRecordHead(head[:], payload)
	dst = append(dst, head[:]...)
	return append(dst, payload...)
}

// putRecordHead writes the head of payload's record (its length and
// checksum) into head's first recordHead bytes.
func putRecordHead(head, payload []byte) {
	binary.LittleEndian.PutUint32(head[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(head[4:], crc32.Checksum(payload, crcTab))
}

// segmentName is the file name of the segment whose first event is seq.
func segmentName(seq uint64) string {
	return fmt.Sprintf("%020d%s", seq, segmentExt)
}

// segmentFile is one segment found in a log folder.
type segmentFile struct {
	name  string // base name
	path  string
	first uint64 // from the name
	size  int64
}

// listSegments returns the folder's segments in log order. Other files are
// left alone; a ".seg" file whose name is not a sequence number is an error,
// since it would be silently skipped otherwise.
func listSegments(dir string) ([]segmentFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the event log folder: %w", err)
	}
	var out []segmentFile
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, segmentExt) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(n, segmentExt), 10, 64)
		if err != nil || seq == 0 {
			return nil, fmt.Errorf("event log folder %s holds %s, which is not named by a sequence number: move it out of the folder", dir, n)
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, segmentFile{name: n, path: filepath.Join(dir, n), first: seq, size: info.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out, nil
}
