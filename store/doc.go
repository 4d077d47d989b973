// Package store is the manager's durable event log: an append-only record of
// every event the reducer applied, in order, so that a log can be replayed
// offline to explain the state it produced.
//
// # On disk
//
// A log is a folder of segment files. Each is named by the sequence number of
// its first event, zero-padded to 20 digits with the extension ".seg", so the
// names sort in log order. A segment starts with a 24-byte header:
//
//	magic    8 bytes  "OMEQLOG" and a zero byte
//	format   2 bytes  the segment format (FormatVersion), little-endian
//	schema   2 bytes  the events schema version the writer encoded with
//	first    8 bytes  the sequence number of the segment's first event
//	crc      4 bytes  CRC-32C (Castagnoli) of the 20 bytes before it
//
// and is followed by records, each
//
//	length   4 bytes  of the payload, little-endian
//	crc      4 bytes  CRC-32C of the payload
//	payload           one event in the events package's encoding
//
// # Writing
//
// [Open] scans the folder, finds the last event written and continues the
// sequence after it: a manager restarted on the same folder numbers its
// events with no gap. Each [Log.Append] is a single write(2) of the whole
// record, unbuffered, and [Log.AppendBatch] one write(2) of its records per
// segment, so a killed process loses no appended event; what a machine
// crash may lose depends on the [SyncPolicy] (see its values). A [Recorder]
// appends on a goroutine of its own, in batches: it lets events gather for
// up to [Linger], and writes at once when half its queue is full or a
// caller of [Recorder.Wait] waits. The events still in its queue when the
// process is killed are lost, so a caller that must not act on an event
// the log may lose (a write to the API server) waits for it first.
// A segment is continued only by a build of the events schema its header
// names: a newer build starts a new segment.
// Segments rotate by size; whole segments older than the age bound, or
// beyond the byte bound, are removed oldest first. The active segment is
// never removed.
//
// # Reading
//
// [Read] returns the events in order. A record that fails its checksum
// (or whose length or event cannot be read) is reported as a [Problem]
// naming its segment and byte offset, and reading goes on at the next
// offset in that segment where a record's checksum holds; the events lost
// in between are reported as a gap. A record cut short (a torn write) ends
// its segment, and reading carries on with the next one. Nothing is dropped without a
// Problem saying so. A segment written by a newer format, or an event of a
// newer schema, stops the read with an error that says which build to use.
package store
