package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// SchemaVersion is the version of the encoding this build writes, and the
// newest it reads. Bump it whenever an encoded event changes shape; teach
// Unmarshal to upgrade older versions, never to guess at newer ones.
//
// Version 2 added the DeviceClass and ResourceSlice kinds and the Config's
// deviceClassMappings. A version 1 line reads as it always did: it cannot
// carry any of them.
const SchemaVersion = 2

// VersionError is a line written with a schema version this build cannot
// read.
type VersionError struct {
	// Version is the line's version; 0 when the line has none.
	Version int
}

func (e *VersionError) Error() string {
	if e.Version == 0 {
		return `the event has no schema version (field "v"): it was not written by an event log encoder`
	}
	if e.Version > SchemaVersion {
		return fmt.Sprintf("the event has schema version %d, newer than %d, the newest this build reads: read the log with the ome-quota-manager version that wrote it, or a newer one", e.Version, SchemaVersion)
	}
	return fmt.Sprintf("the event has schema version %d, which no ome-quota-manager ever wrote: the log is corrupt", e.Version)
}

// wire is an event as encoded: the schema version first, then the envelope.
type wire struct {
	V int `json:"v"`
	Event
}

// Marshal encodes ev as one JSON object without a trailing newline. Time is
// written in UTC, so the bytes do not depend on the writer's time zone.
func Marshal(ev Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("cannot encode event: %w", err)
	}
	ev.Time = ev.Time.UTC()
	return json.Marshal(wire{V: SchemaVersion, Event: ev})
}

// Unmarshal decodes one encoded event. It refuses a line of another schema
// version with a *VersionError, fields this version does not know, and an
// event that Validate refuses.
func Unmarshal(line []byte) (Event, error) {
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return Event{}, fmt.Errorf("not an encoded event: %w", err)
	}
	if probe.V == nil {
		return Event{}, &VersionError{}
	}
	if *probe.V < 1 || *probe.V > SchemaVersion {
		return Event{}, &VersionError{Version: *probe.V}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Event{}, fmt.Errorf("schema version %d event does not decode: %w", *probe.V, err)
	}
	if err := w.Event.Validate(); err != nil {
		return Event{}, err
	}
	if w.V == 1 {
		if err := v1Only(&w.Event); err != nil {
			return Event{}, err
		}
	}
	return w.Event, nil
}

// Encoder writes events as JSON lines.
type Encoder struct {
	w io.Writer
}

// NewEncoder returns an encoder writing to w. It does not buffer: wrap w in
// a bufio.Writer to batch writes.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes ev and a newline.
func (e *Encoder) Encode(ev Event) error {
	b, err := Marshal(ev)
	if err != nil {
		return err
	}
	_, err = e.w.Write(append(b, '\n'))
	return err
}

// Decoder reads events written by an Encoder.
type Decoder struct {
	r    *bufio.Reader
	line int
}

// NewDecoder returns a decoder reading from r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReader(r)} }

// Decode returns the next event, or io.EOF after the last one. An error
// names the line it is on. Blank lines are skipped.
func (d *Decoder) Decode() (Event, error) {
	for {
		b, err := d.r.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			return Event{}, err
		}
		d.line++
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			if err != nil {
				return Event{}, err
			}
			continue
		}
		ev, derr := Unmarshal(b)
		if derr != nil {
			return Event{}, fmt.Errorf("event log line %d: %w", d.line, derr)
		}
		return ev, nil
	}
}

// v1Only refuses what schema version 1 could not hold.
func v1Only(e *Event) error {
	if e.Kind == KindDeviceClass || e.Kind == KindResourceSlice {
		return fmt.Errorf("event #%d has kind %s, which schema version 1 reserved and never wrote: the log is corrupt", e.Seq, e.Kind)
	}
	if e.Config != nil && len(e.Config.DeviceClassMappings) > 0 {
		return fmt.Errorf("config event #%d carries deviceClassMappings, which schema version 1 never wrote: the log is corrupt", e.Seq)
	}
	return nil
}
