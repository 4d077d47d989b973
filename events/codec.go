package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// SchemaVersion is the version of the encoding this build writes, and the
// newest it reads. Bump it whenever an encoded event changes shape or a new
// kind appears (an older reader would refuse it as unknown); teach the
// decoder to upgrade older versions, never to guess at newer ones.
//
// Versions:
//   - 1: the first.
//   - 2: adds the Synced and Start kinds, the DeviceClass and ResourceSlice
//     kinds (DRA capacity), and the Config's enrolledNamespaces,
//     coverResources and deviceClassMappings. In version 1 the first Tick
//     marked the informers' initial lists as delivered; the Decoder upgrades
//     a version 1 log by reading its first Tick as Synced. A version 1 line
//     cannot carry anything version 2 added.
//   - 3: adds the Verdict kind (the webhook's answers). Versions 1 and 2
//     read as before; a line of theirs cannot carry a Verdict.
//   - 4: adds the Outcome kind (how the leader's applier left a node's
//     Kueue objects) and the Leadership kind. Versions 1 to 3 read as
//     before; a line of theirs cannot carry either.
//   - 5: adds an AcceleratorQuota event's resourceVersion (version), an
//     AcceleratorQuota's uid, and a Verdict's objectUID and base, which the
//     webhook and replay's trail read. Older lines read as before, without
//     them.
//   - 6: adds a failure's source and the MeasureRecovered kind: a failing
//     informer's list or watch, from its first error to its recovery.
//     Older lines read as before; a line of theirs cannot carry either.
//   - 7: adds the Drift kind (a Kueue object changed behind the manager's
//     back) and an AcceleratorQuota's stored conditions (their stamps), and
//     types the management-mode fields as the API now does: a perCluster
//     share's clusterName is cluster, a distribution holds a policy. Older
//     lines read as before, their split fields upgraded
//     (upgradeSplitFields); a line of theirs cannot carry a drift or
//     conditions.
//   - 8: adds the Member kind (what a management plane read of a member
//     cluster) and the Config's mode and members. Older lines read as
//     before; a line of theirs cannot carry either.
//   - 9: adds the Membership kind (a member cluster joining or leaving a
//     plane's fleet, from its inventory), the Config's origin, and what a
//     member's Kueue reserved for a copy (a Member event's
//     usage[].reserved, left out when 0). Older lines read as before,
//     with nothing reserved; a line of theirs cannot carry any of them.
//   - 10: adds an AcceleratorQuota's deleting (its deletionTimestamp is
//     set and it waits for finalizers). Older lines read as before, as
//     objects not being deleted; a line of theirs cannot carry it.
//   - 11: adds the QuotaListing and QuotaListed kinds, which bracket a
//     list of AcceleratorQuotas (the events between them come in the
//     order of names, not versions). Older lines read as before, without
//     them: their AcceleratorQuota events are read in the order of
//     versions, as older builds took them; a line of theirs cannot carry
//     either kind.
//   - 12: adds what a management plane needs to keep its fleet's budgets
//     while members move: a member's copies' resourceVersion and budgets,
//     a leadership's term and nonce, a plane team's hold record and copies
//     finalizer (Quota.holds, Quota.guarded), root's goneClusters, and the
//     Config's memberGrace. Older lines read as before, without them; a
//     line of theirs cannot carry any of them.
//   - 13: adds an AcceleratorQuota's record and a Verdict's record and
//     authenticated (events.RecordOf: the API server's own record of who
//     wrote the object; whether the review came with the API server's
//     client certificate), which replay's trail weighs. Older lines read
//     as before, without them: unauthenticated, with no record; a line
//     of theirs cannot carry them.
const SchemaVersion = 13

// oldestVersion is the oldest schema version this build reads.
const oldestVersion = 1

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
	b, err := AppendMarshal(nil, ev)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// marshalWire is the encoding through encoding/json alone, which
// AppendMarshal's hand-written one equals.
func marshalWire(ev Event) ([]byte, error) {
	ev.Time = ev.Time.UTC()
	return json.Marshal(wire{V: SchemaVersion, Event: ev})
}

// Unmarshal decodes one encoded event. It refuses a line of a schema
// version it does not read with a *VersionError, fields its version does
// not know, and an event that Validate refuses. A line of an older version
// is returned as written: upgrading a version 1 log needs the whole log,
// which the Decoder reads.
func Unmarshal(line []byte) (Event, error) {
	ev, _, err := unmarshal(line)
	return ev, err
}

func unmarshal(line []byte) (Event, int, error) {
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return Event{}, 0, fmt.Errorf("not an encoded event: %w", err)
	}
	if probe.V == nil {
		return Event{}, 0, &VersionError{}
	}
	v := *probe.V
	if v < oldestVersion || v > SchemaVersion {
		return Event{}, 0, &VersionError{Version: v}
	}
	if v < 7 {
		var err error
		if line, err = upgradeSplitFields(line); err != nil {
			return Event{}, 0, fmt.Errorf("schema version %d event does not decode: %w", v, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Event{}, 0, fmt.Errorf("schema version %d event does not decode: %w", v, err)
	}
	if err := w.Event.Validate(); err != nil {
		return Event{}, 0, err
	}
	if v == 1 {
		if err := v1Only(&w.Event); err != nil {
			return Event{}, 0, err
		}
	}
	if (v < 3 && w.Event.Kind == KindVerdict) || (v < 4 && (w.Event.Kind == KindOutcome || w.Event.Kind == KindLeadership)) ||
		(v < 6 && (w.Event.Kind == KindMeasureRecovered || (w.Event.Failure != nil && w.Event.Failure.Source != ""))) ||
		(v < 7 && (w.Event.Kind == KindDrift || (w.Event.Quota != nil && len(w.Event.Quota.Conditions) > 0))) ||
		(v < 8 && (w.Event.Kind == KindMember || (w.Event.Config != nil && (w.Event.Config.Mode != "" || len(w.Event.Config.Members) > 0)))) ||
		(v < 9 && (w.Event.Kind == KindMembership || (w.Event.Config != nil && w.Event.Config.Origin != ""))) ||
		(v < 11 && (w.Event.Kind == KindQuotaListing || w.Event.Kind == KindQuotaListed)) {
		return Event{}, 0, fmt.Errorf("event #%d has kind %s, which schema version %d did not have: the log is corrupt", w.Event.Seq, w.Event.Kind, v)
	}
	if v < 13 && ((w.Event.Quota != nil && w.Event.Quota.Record != "") || (w.Event.Verdict != nil && (w.Event.Verdict.Record != "" || w.Event.Verdict.Authenticated))) {
		return Event{}, 0, fmt.Errorf("event #%d carries a record or authenticated, which schema version %d never wrote: the log is corrupt", w.Event.Seq, v)
	}
	if v < 10 && w.Event.Quota != nil && w.Event.Quota.Deleting {
		return Event{}, 0, fmt.Errorf("AcceleratorQuota event #%d carries deleting, which schema version %d never wrote: the log is corrupt", w.Event.Seq, v)
	}
	if v < 12 && since12(&w.Event) {
		return Event{}, 0, fmt.Errorf("event #%d carries a field of schema version 12 (a copy's version or budgets, a term or nonce, holds, guarded, goneClusters or memberGrace), which schema version %d never wrote: the log is corrupt", w.Event.Seq, v)
	}
	if v < 9 && w.Event.Member != nil && slices.ContainsFunc(w.Event.Member.Usage, func(u MemberUsage) bool { return !u.Reserved.IsZero() }) {
		return Event{}, 0, fmt.Errorf("member event #%d carries a reserved amount, which schema version %d never wrote: the log is corrupt", w.Event.Seq, v)
	}
	return w.Event, v, nil
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

// Decoder reads events written by an Encoder, upgrading older versions.
type Decoder struct {
	r    *bufio.Reader
	line int
	// v1Ticked is whether a version 1 Tick was read: the first one is
	// read as Synced.
	v1Ticked bool
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
		ev, v, derr := unmarshal(b)
		if derr != nil {
			return Event{}, fmt.Errorf("event log line %d: %w", d.line, derr)
		}
		if v == 1 && ev.Kind == KindTick && !d.v1Ticked {
			d.v1Ticked = true
			ev.Kind = KindSynced
		}
		return ev, nil
	}
}

// upgradeSplitFields rewrites the management-mode fields of the specs in
// a line written before schema version 7, when the API stored them
// untyped: a perCluster share's clusterName is now cluster, and of a
// distribution only its policy is kept (nothing else of it was ever read,
// in any mode). A line without either field is returned as it is.
func upgradeSplitFields(line []byte) ([]byte, error) {
	if !bytes.Contains(line, []byte(`"clusterName"`)) && !bytes.Contains(line, []byte(`"distribution"`)) {
		return line, nil
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // amounts as written
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		return nil, err
	}
	upgrade := func(spec any) {
		m, _ := spec.(map[string]any)
		if m == nil {
			return
		}
		if d, ok := m["distribution"].(map[string]any); ok {
			kept := map[string]any{}
			if p, ok := d["policy"].(string); ok {
				kept["policy"] = p
			}
			m["distribution"] = kept
		}
		budgets, _ := m["budgets"].([]any)
		for _, b := range budgets {
			bm, _ := b.(map[string]any)
			shares, _ := bm["perCluster"].([]any)
			for _, sh := range shares {
				if sm, _ := sh.(map[string]any); sm != nil && sm["clusterName"] != nil && sm["cluster"] == nil {
					sm["cluster"] = sm["clusterName"]
					delete(sm, "clusterName")
				}
			}
		}
	}
	if q, _ := ev["quota"].(map[string]any); q != nil {
		upgrade(q["spec"])
	}
	if vd, _ := ev["verdict"].(map[string]any); vd != nil {
		upgrade(vd["old"])
		upgrade(vd["new"])
	}
	return json.Marshal(ev)
}

// v1Only refuses what schema version 1 could not hold.
func v1Only(e *Event) error {
	switch e.Kind {
	case KindDeviceClass, KindResourceSlice, KindSynced, KindStart:
		return fmt.Errorf("event #%d has kind %s, which schema version 1 did not have: the log is corrupt", e.Seq, e.Kind)
	}
	if e.Config != nil && (len(e.Config.EnrolledNamespaces) > 0 || len(e.Config.CoverResources) > 0) {
		return fmt.Errorf("config event #%d carries enrolledNamespaces or coverResources, which schema version 1 never wrote: the log is corrupt", e.Seq)
	}
	if e.Config != nil && len(e.Config.DeviceClassMappings) > 0 {
		return fmt.Errorf("config event #%d carries deviceClassMappings, which schema version 1 never wrote: the log is corrupt", e.Seq)
	}
	return nil
}

// since12 reports whether ev carries a field that came with schema
// version 12.
func since12(ev *Event) bool {
	switch {
	case ev.Member != nil && slices.ContainsFunc(ev.Member.Copies, func(c MemberCopy) bool { return c.Version != "" || len(c.Budgets) > 0 }):
		return true
	case ev.Leadership != nil && (ev.Leadership.Term != 0 || ev.Leadership.Nonce != ""):
		return true
	case ev.Quota != nil && (ev.Quota.Holds != nil || ev.Quota.Guarded || len(ev.Quota.Spec.GoneClusters) > 0):
		return true
	case ev.Config != nil && ev.Config.MemberGrace.Duration != 0:
		return true
	}
	return false
}
