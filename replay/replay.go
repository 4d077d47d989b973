package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/store"
)

// WhatIf overrides parts of the recorded configuration: each Config event of
// the log is applied with these fields replaced. Nil fields keep what was
// recorded.
type WhatIf struct {
	MaxTreeDepth      *int
	HysteresisPercent *int
	MeasuredResources []string
	// EnrolledNamespaces changes what --objects shows; it changes no
	// transition.
	EnrolledNamespaces []string
}

// IsZero reports whether nothing is overridden.
func (w WhatIf) IsZero() bool {
	return w.MaxTreeDepth == nil && w.HysteresisPercent == nil && w.MeasuredResources == nil && w.EnrolledNamespaces == nil
}

func (w WhatIf) apply(c events.Config) events.Config {
	if w.MaxTreeDepth != nil {
		c.MaxTreeDepth = *w.MaxTreeDepth
	}
	if w.HysteresisPercent != nil {
		c.HysteresisPercent = *w.HysteresisPercent
	}
	if w.MeasuredResources != nil {
		c.MeasuredResources = slices.Clone(w.MeasuredResources)
	}
	if w.EnrolledNamespaces != nil {
		c.EnrolledNamespaces = slices.Clone(w.EnrolledNamespaces)
	}
	return c.Normalized()
}

// Options say how far to replay and with what changes.
type Options struct {
	// AtSeq stops after the event with this sequence number; AtTime after
	// the last event received at or before this time. Zero values replay
	// the whole log.
	AtSeq  uint64
	AtTime time.Time
	WhatIf WhatIf
	// Objects tracks the Kueue objects as the manager would have left them
	// (Result.Objects); it re-projects the tree after every event that can
	// change them.
	Objects bool
	// Others are the logs of other replicas: their verdicts join the
	// first log's (Result.Trail); their other events are not replayed.
	Others []string
}

// Entry is one transition of the timeline, with the event that caused it.
type Entry struct {
	Seq     uint64       `json:"seq"`
	Time    time.Time    `json:"time"`
	Node    string       `json:"node"`
	From    state.Phase  `json:"from"`
	To      state.Phase  `json:"to"`
	Reason  state.Reason `json:"reason"`
	Message string       `json:"message,omitempty"`
	Cause   string       `json:"cause"`
}

// CapacityChange is a change of one pair's installed capacity or
// high-water mark on root, with the event that caused it (allocatable is
// reported as it stood then).
type CapacityChange struct {
	Seq           uint64    `json:"seq"`
	Time          time.Time `json:"time"`
	Pair          string    `json:"pair"`
	Installed     [2]string `json:"installed"`
	HighWaterMark [2]string `json:"highWaterMark"`
	Allocatable   [2]string `json:"allocatable"`
	Cause         string    `json:"cause"`
	pair          state.Pair
	// amounts are installed, mark and allocatable, before and after.
	amounts [3][2]amount
}

type amount = state.Amount

// objectVersion is the life and version of an object as a log last held it.
type objectVersion struct {
	uid     string
	version uint64
}

// SpecChange is a write of one AcceleratorQuota seen in the log.
type SpecChange struct {
	Seq   uint64    `json:"seq"`
	Time  time.Time `json:"time"`
	Node  string    `json:"node"`
	Op    string    `json:"op"`
	Event string    `json:"event"`
	// Changes are what the write changed in the spec the log held before,
	// old -> new ("created" for the first one the log holds).
	Changes []string `json:"changes,omitempty"`
	// Listed is set on the objects an informer listed at a start (between
	// a Start marker, or the log's beginning, and Synced): they were
	// written earlier, not then.
	Listed bool `json:"listed,omitempty"`
	// Unruled is set on an update that changed nothing the rules read
	// (state.SameShape, such as a borrowingLimit's amount): the webhook
	// admits it without judging, so no verdict is expected.
	Unruled bool `json:"-"`
	// UID and Version are the object's, Prev and PrevUID the version and
	// uid the log held before (what an update or delete was judged on;
	// zero and empty when it held none), Spec the spec stored (nil on a
	// delete): the trail matches verdicts with them (attribute).
	UID     string                        `json:"uid,omitempty"`
	Version uint64                        `json:"version,omitempty"`
	Prev    uint64                        `json:"prev,omitempty"`
	PrevUID string                        `json:"-"`
	Spec    *v1beta1.AcceleratorQuotaSpec `json:"-"`
	// Record is the stored object's events.RecordOf its managedFields
	// (empty on a delete and in logs before schema version 13).
	Record string `json:"-"`
}

// OutcomeEntry is one report of the leader's applier on a node: what its
// Materialized condition said from then on.
type OutcomeEntry struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	events.Outcome
	// Event is the report, for people.
	Event string `json:"event"`
}

// DriftEntry is one change of a Kueue object behind the manager's back.
type DriftEntry struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	events.Drift
	// Event is the change, for people.
	Event string `json:"event"`
}

// MemberEntry is one report of a management plane on a member cluster.
type MemberEntry struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Cluster string    `json:"cluster"`
	events.Member
	// Event is the report, for people.
	Event string `json:"event"`
}

// MembershipEntry is one change of a management plane's fleet: a
// cluster that joined it, left it, or whose inventory entry changed.
type MembershipEntry struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Cluster string    `json:"cluster"`
	events.Membership
	// Event is the change, for people.
	Event string `json:"event"`
}

// Result is a replayed log: the state it ends in, the transitions on the
// way, and what changed root's capacity.
type Result struct {
	State    *state.State
	Timeline []Entry
	Capacity []CapacityChange
	Specs    []SpecChange
	// Verdicts are the webhook's answers recorded in the first log.
	Verdicts []VerdictEntry
	// Outcomes are the leader's applier's reports, in log order.
	Outcomes []OutcomeEntry
	// Drifts are the Kueue objects changed behind the manager's back, in
	// log order: each made the leader compare the node's objects again.
	Drifts []DriftEntry
	// Members are what a management plane read of its member clusters,
	// in log order.
	Members []MemberEntry
	// Memberships are the changes of a plane's fleet, in order.
	Memberships []MembershipEntry
	// Events counts the events applied; Last is the last one's seq.
	Events   int
	Last     uint64
	LastTime time.Time
	Problems []store.Problem
	// Config is the configuration in force at the end, after WhatIf.
	Config events.Config

	objects map[string]*nodeObjects
	// foreign are the other logs' verdicts, by time, each request once.
	foreign []VerdictEntry
	// logs are the folders read: the one replayed, then those whose
	// verdicts joined it, numbered from 1 in a step's "LOG:SEQ".
	logs []string
}

// Logs are the folders Run read: the one it replayed, then those whose
// verdicts it merged (the other replicas' logs, then the logs of verdicts
// inside each), in the order of the numbers that place their
// verdicts ("2:17": the second of them, event 17).
func (r *Result) Logs() []string { return r.logs }

// errDone ends a read early once the requested point is passed.
var errDone = errors.New("done")

// Run replays the log in dir.
func Run(dir string, o Options) (*Result, error) {
	r := &Result{State: state.New()}
	var prev map[state.Pair]state.CapacityEntry
	specs := map[string]*v1beta1.AcceleratorQuotaSpec{}
	versions := map[string]objectVersion{}
	listing := true
	rep, err := store.Read(dir, 0, func(ev events.Event) error {
		if o.AtSeq != 0 && ev.Seq > o.AtSeq {
			return errDone
		}
		if !o.AtTime.IsZero() && ev.Time.After(o.AtTime) {
			return errDone
		}
		if ev.Kind == events.KindConfig && ev.Config != nil && !o.WhatIf.IsZero() {
			c := o.WhatIf.apply(*ev.Config)
			ev.Config = &c
		}
		var cause string
		causeOf := func() string {
			if cause == "" {
				cause = describe(ev)
			}
			return cause
		}
		ts := r.State.Apply(ev)
		for _, t := range ts {
			r.Timeline = append(r.Timeline, Entry{Seq: ev.Seq, Time: ev.Time.UTC(), Node: t.Node, From: t.From, To: t.To,
				Reason: t.Reason, Message: t.Message, Cause: causeOf()})
		}
		if o.Objects {
			r.trackObjects(ev, len(ts))
		}
		switch ev.Kind {
		case events.KindAcceleratorQuota:
			var spec *v1beta1.AcceleratorQuotaSpec
			if ev.Quota != nil {
				spec = &ev.Quota.Spec
			}
			var changes []string
			unruled := false
			if old, ok := specs[ev.Key]; ok || spec != nil {
				changes = specChanges(old, spec)
				unruled = old != nil && spec != nil && state.SameShape(ev.Key, old, spec)
			}
			if spec == nil {
				delete(specs, ev.Key)
			} else {
				specs[ev.Key] = spec
			}
			sc := SpecChange{Seq: ev.Seq, Time: ev.Time.UTC(), Node: ev.Key, Op: string(ev.Op), Event: causeOf(), Changes: changes, Listed: listing, Unruled: unruled,
				Version: ev.Version, Prev: versions[ev.Key].version, PrevUID: versions[ev.Key].uid, Spec: spec}
			if ev.Quota != nil {
				sc.UID, sc.Record = ev.Quota.UID, ev.Quota.Record
				versions[ev.Key] = objectVersion{ev.Quota.UID, ev.Version}
			} else {
				delete(versions, ev.Key)
			}
			r.Specs = append(r.Specs, sc)
		case events.KindStart:
			listing = true
		case events.KindSynced:
			listing = false
		case events.KindVerdict:
			r.Verdicts = append(r.Verdicts, verdictEntry(0, ev))
		case events.KindOutcome:
			r.Outcomes = append(r.Outcomes, OutcomeEntry{Seq: ev.Seq, Time: ev.Time.UTC(), Node: ev.Key, Outcome: *ev.Outcome, Event: causeOf()})
		case events.KindDrift:
			r.Drifts = append(r.Drifts, DriftEntry{Seq: ev.Seq, Time: ev.Time.UTC(), Node: ev.Key, Drift: *ev.Drift, Event: causeOf()})
		case events.KindMember:
			r.Members = append(r.Members, MemberEntry{Seq: ev.Seq, Time: ev.Time.UTC(), Cluster: ev.Key, Member: *ev.Member, Event: causeOf()})
		case events.KindMembership:
			r.Memberships = append(r.Memberships, MembershipEntry{Seq: ev.Seq, Time: ev.Time.UTC(), Cluster: ev.Key, Membership: *ev.Membership, Event: causeOf()})
		}
		prev = r.capacityChanges(ev, causeOf, prev)
		r.Events++
		r.Last, r.LastTime = ev.Seq, ev.Time.UTC()
		return nil
	})
	r.Problems = rep.Problems
	r.Config = r.State.Config()
	if err != nil && !errors.Is(err, errDone) {
		return r, err
	}
	var until time.Time
	if o.AtSeq != 0 || !o.AtTime.IsZero() {
		until = r.LastTime
	}
	// The other logs' verdicts, and every log's logs of verdicts, which
	// the manager keeps apart inside it (store.VerdictsDir, and
	// store.AuthenticatedVerdictsDir for authenticated reviews).
	verdictLogs := slices.Clone(o.Others)
	for _, d := range append([]string{dir}, o.Others...) {
		for _, sub := range []string{store.VerdictsDir, store.AuthenticatedVerdictsDir} {
			if fi, err := os.Stat(filepath.Join(d, sub)); err == nil && fi.IsDir() {
				verdictLogs = append(verdictLogs, filepath.Join(d, sub))
			}
		}
	}
	r.logs = append([]string{dir}, verdictLogs...)
	var others []VerdictEntry
	for i, d := range verdictLogs {
		vs, problems, err := readVerdicts(d, i+1, until)
		r.Problems = append(r.Problems, problems...)
		if err != nil {
			return r, err
		}
		others = append(others, vs...)
	}
	r.mergeVerdicts(others)
	if o.AtSeq != 0 && r.Last < o.AtSeq && r.Last != 0 && o.AtSeq > rep.Last {
		return r, fmt.Errorf("the log ends at event %d, before --at %d", rep.Last, o.AtSeq)
	}
	return r, nil
}

// capacityChanges records the pairs whose figures the event changed.
func (r *Result) capacityChanges(ev events.Event, cause func() string, prev map[state.Pair]state.CapacityEntry) map[state.Pair]state.CapacityEntry {
	switch ev.Kind {
	case events.KindAcceleratorQuota, events.KindClusterQueue, events.KindStart:
		if ev.Key != "root" {
			return prev // cannot move capacity
		}
	}
	cur := r.State.Capacity()
	next := make(map[state.Pair]state.CapacityEntry, len(cur))
	for _, c := range cur {
		next[c.Pair] = c
		p, ok := prev[c.Pair]
		// Allocatable alone (a node cordoned or NotReady) moves no mark:
		// the history keeps what explains marks, installed and the mark.
		if ok && p.Installed == c.Installed && p.HighWaterMark == c.HighWaterMark {
			continue
		}
		r.Capacity = append(r.Capacity, change(ev, cause(), c.Pair, p, c))
	}
	for pair, p := range prev {
		if _, ok := next[pair]; !ok {
			r.Capacity = append(r.Capacity, change(ev, cause(), pair, p, state.CapacityEntry{Pair: pair}))
		}
	}
	return next
}

func change(ev events.Event, cause string, pair state.Pair, from, to state.CapacityEntry) CapacityChange {
	return CapacityChange{
		Seq: ev.Seq, Time: ev.Time.UTC(), Pair: pair.String(), Cause: cause,
		Installed:     [2]string{from.Installed.String(), to.Installed.String()},
		HighWaterMark: [2]string{from.HighWaterMark.String(), to.HighWaterMark.String()},
		Allocatable:   [2]string{from.Allocatable.String(), to.Allocatable.String()},
		pair:          pair,
		amounts:       [3][2]amount{{from.Installed, to.Installed}, {from.HighWaterMark, to.HighWaterMark}, {from.Allocatable, to.Allocatable}},
	}
}

// describe is a one-line account of an event, for people.
func describe(ev events.Event) string {
	switch ev.Kind {
	case events.KindAcceleratorQuota:
		if ev.Op == events.OpDelete {
			return fmt.Sprintf("#%d AcceleratorQuota %s deleted", ev.Seq, ev.Key)
		}
		return fmt.Sprintf("#%d AcceleratorQuota %s written (generation %d)", ev.Seq, ev.Key, ev.Quota.Generation)
	case events.KindNode:
		if ev.Op == events.OpDelete {
			return fmt.Sprintf("#%d Node %s deleted", ev.Seq, ev.Key)
		}
		n := ev.Node
		s := fmt.Sprintf("#%d Node %s updated (ready=%t", ev.Seq, ev.Key, n.Ready)
		if n.Unschedulable {
			s += ", cordoned"
		}
		return s + ")"
	case events.KindResourceFlavor:
		if ev.Op == events.OpDelete {
			return fmt.Sprintf("#%d ResourceFlavor %s deleted", ev.Seq, ev.Key)
		}
		return fmt.Sprintf("#%d ResourceFlavor %s written", ev.Seq, ev.Key)
	case events.KindClusterQueue:
		if ev.Op == events.OpDelete {
			return fmt.Sprintf("#%d ClusterQueue %s deleted", ev.Seq, ev.Key)
		}
		return fmt.Sprintf("#%d ClusterQueue %s usage", ev.Seq, ev.Key)
	case events.KindTick:
		return fmt.Sprintf("#%d timer tick (measurement)", ev.Seq)
	case events.KindConfig:
		c := ev.Config
		return fmt.Sprintf("#%d configuration (maxTreeDepth=%d hysteresisPercent=%d)", ev.Seq, c.MaxTreeDepth, c.HysteresisPercent)
	case events.KindMeasureFailed:
		if ev.Failure.Source != "" {
			return fmt.Sprintf("#%d the %s informer fails, so no stamp is refreshed: %s", ev.Seq, ev.Failure.Source, ev.Failure.Reason)
		}
		return fmt.Sprintf("#%d measurement failed: %s", ev.Seq, ev.Failure.Reason)
	case events.KindMeasureRecovered:
		return fmt.Sprintf("#%d the %s informer recovered", ev.Seq, ev.Failure.Source)
	case events.KindVerdict:
		v := ev.Verdict
		answer := "admitted"
		if !v.Allowed {
			answer = "denied"
		}
		return fmt.Sprintf("#%d %s of AcceleratorQuota %s by %s %s by the webhook", ev.Seq, v.Operation, ev.Key, orNone(v.User), answer)
	case events.KindOutcome:
		o := ev.Outcome
		switch o.Kind {
		case events.OutcomeNone:
			return fmt.Sprintf("#%d the applier holds %s's Kueue objects as they are", ev.Seq, ev.Key)
		case events.OutcomeApplied:
			return fmt.Sprintf("#%d the applier brought %s's Kueue objects in place", ev.Seq, ev.Key)
		}
		return fmt.Sprintf("#%d the applier reports %s on %s: %s", ev.Seq, o.Kind, ev.Key, o.Message)
	case events.KindDrift:
		d := ev.Drift
		obj := d.Object + " " + d.Name
		if d.Namespace != "" {
			obj = d.Object + " " + d.Namespace + "/" + d.Name
		}
		return fmt.Sprintf("#%d %s was %s behind the manager's back (resourceVersion %s)", ev.Seq, obj, d.Change, orNone(d.Version))
	case events.KindMember:
		if m := ev.Member; !m.Reachable {
			return fmt.Sprintf("#%d member cluster %s does not answer: %s", ev.Seq, ev.Key, m.Message)
		}
		var marks []string
		for _, c := range ev.Member.Capacity {
			marks = append(marks, fmt.Sprintf("%s@%s=%s", c.Resource, c.Flavor, c.HighWaterMark.String()))
		}
		return fmt.Sprintf("#%d member cluster %s reported high-water marks %s", ev.Seq, ev.Key, orNone(strings.Join(marks, ",")))
	case events.KindMembership:
		m := ev.Membership
		switch {
		case !m.Member:
			return fmt.Sprintf("#%d member cluster %s left the fleet: %s", ev.Seq, ev.Key, orNone(m.Message))
		case m.Health == "False" || m.Health == "Unknown":
			return fmt.Sprintf("#%d member cluster %s is in the fleet (%s); the inventory reports its control plane healthy %s: %s", ev.Seq, ev.Key, m.Source, m.Health, orNone(m.Message))
		}
		return fmt.Sprintf("#%d member cluster %s is in the fleet (%s)", ev.Seq, ev.Key, orNone(m.Source))
	case events.KindLeadership:
		if ev.Leadership.Change == events.LeadershipAcquired {
			return fmt.Sprintf("#%d %s took the lead", ev.Seq, ev.Leadership.Identity)
		}
		return fmt.Sprintf("#%d %s lost the lead", ev.Seq, ev.Leadership.Identity)
	}
	return ev.String()
}
