package replay

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// The specs of team-alpha in the authorship cases: its budget of A100s.
func alphaSpec(nominal string) *v1beta1.AcceleratorQuotaSpec {
	return specOf(aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", nominal).Obj())
}

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

// review is a verdict on team-alpha "by" user, as a review says it, with
// the written object's uid and the version it was judged on; its request
// uid is the user's and the second's unless reviewUID is given.
type review struct {
	sec                int
	user, op           string
	objectUID, base    string
	old, new           *v1beta1.AcceleratorQuotaSpec
	denied             bool
	replica, reviewUID string
	// noIdentity is a verdict of a build before ObjectUID and Base.
	noIdentity bool
	// authenticated: the review came with the API server's client
	// certificate; record is the admitted object's events.RecordOf.
	authenticated bool
	record        string
}

func (r review) event() events.Event {
	v := &events.Verdict{UID: r.reviewUID, User: r.user, Operation: r.op, Allowed: !r.denied,
		Old: r.old, New: r.new, Replica: r.replica, ObjectUID: r.objectUID, Base: r.base, Authenticated: r.authenticated, Record: r.record}
	if v.UID == "" {
		v.UID = fmt.Sprintf("%s-%d", r.user, r.sec)
	}
	if v.Replica == "" {
		v.Replica = "a"
	}
	if r.denied {
		v.Code, v.Message = 403, "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28"
	}
	if r.noIdentity {
		v.ObjectUID, v.Base = "", ""
	}
	return events.Verdicted(at(r.sec), "team-alpha", v)
}

// alphaAt is team-alpha (uid alpha) stored at resourceVersion rv.
func alphaAt(sec int, gen int64, spec *v1beta1.AcceleratorQuotaSpec, rv uint64) events.Event {
	return stored(at(sec), &events.Quota{Name: "team-alpha", UID: "alpha", Generation: gen, Spec: *spec}, rv)
}

// alphaRecorded is alphaAt with the record of its managedFields.
func alphaRecorded(sec int, gen int64, spec *v1beta1.AcceleratorQuotaSpec, rv uint64, record string) events.Event {
	return stored(at(sec), &events.Quota{Name: "team-alpha", UID: "alpha", Generation: gen, Spec: *spec, Record: record}, rv)
}

// alphaGone is team-alpha deleted, the informer's last version rv.
func alphaGone(sec int, rv uint64) events.Event {
	ev := events.Deleted(at(sec), events.KindAcceleratorQuota, "team-alpha")
	ev.Version = rv
	return ev
}

// created is alice's genuine creation of team-alpha at 16 (events 5 and
// 6 of a case's log, version 20).
func created() []events.Event {
	return []events.Event{
		review{sec: 3, user: "alice", op: "CREATE", objectUID: "alpha", new: alphaSpec("16")}.event(),
		alphaAt(3, 1, alphaSpec("16"), 20),
	}
}

func cat(parts ...[]events.Event) []events.Event {
	var out []events.Event
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestTrailAuthorship replays logs in which genuine and forged reviews
// (anyone who reaches the webhook's port can send one naming anyone) meet
// the writes the informer then saw, and checks whom the trail names as the
// author of each change. Every log starts with the same four events (the
// configuration, Synced, root and ml-research), so a case's own events are
// numbered from 5.
func TestTrailAuthorship(t *testing.T) {
	for _, c := range []struct {
		name string
		evs  []events.Event
		// other is another replica's log, whose verdicts join the trail.
		other []events.Event
		// verdicts are the authorship of each verdict, by its place ("7",
		// "1:2"); authors are each write's author ("" for none), by seq.
		verdicts map[string]string
		authors  map[uint64]string
		// unjudged are the writes flagged as having no admitted verdict.
		unjudged []uint64
		// hidden are writes the trail leaves out (no change of the spec).
		hidden []uint64
		// lines are what the text says, spaces squeezed; absent what it
		// must not say.
		lines, absent []string
	}{{
		name: "genuine create, update and delete",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaAt(5, 2, alphaSpec("12"), 25),
				alphaAt(6, 2, alphaSpec("12"), 26), // a status write
				review{sec: 7, user: "carol", op: "DELETE", objectUID: "alpha", base: "26", old: alphaSpec("12")}.event(),
				alphaGone(7, 27),
			}),
		verdicts: map[string]string{"5": "author", "7": "author", "10": "author"},
		authors:  map[uint64]string{6: "alice", 8: "bob", 11: "carol"},
		hidden:   []uint64{9},
		lines: []string{
			"5 2026-11-30T03:00:03Z alice CREATE admitted by a, landed as #6 [created; role ClusterQueue; parent ml-research; nvidia.com/gpu@a100 nominal 16]",
			"6 2026-11-30T03:00:03Z alice AcceleratorQuota team-alpha written (generation 1) [created;",
			"7 2026-11-30T03:00:05Z bob UPDATE admitted by a, landed as #8 [nvidia.com/gpu@a100 nominal 16 -> 12]",
			"8 2026-11-30T03:00:05Z bob AcceleratorQuota team-alpha written (generation 2) [nvidia.com/gpu@a100 nominal 16 -> 12]",
			"10 2026-11-30T03:00:07Z carol DELETE admitted by a, landed as #11 [deleted]",
			"11 2026-11-30T03:00:07Z carol AcceleratorQuota team-alpha deleted [deleted]",
		},
	}, {
		name: "a forged DELETE of a node that stays",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "alice", op: "DELETE", objectUID: "alpha", base: "20", old: alphaSpec("16")}.event(),
				alphaAt(6, 1, alphaSpec("16"), 21), // a status write: team-alpha is still there
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed"},
		authors:  map[uint64]string{6: "alice"},
		hidden:   []uint64{8},
		lines:    []string{"7 2026-11-30T03:00:05Z alice DELETE claimed, never landed (admitted by a) [deleted]"},
		absent:   []string{"DELETE admitted", "team-alpha deleted"},
	}, {
		name: "a forged DELETE, then the node deleted at another version",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "mallory", op: "DELETE", objectUID: "alpha", base: "20", old: alphaSpec("16")}.event(),
				review{sec: 6, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaAt(6, 2, alphaSpec("12"), 25),
				alphaGone(8, 30), // no verdict: the webhook was off
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed", "8": "author"},
		authors:  map[uint64]string{9: "bob", 10: ""},
		unjudged: []uint64{10},
		lines: []string{
			"7 2026-11-30T03:00:05Z mallory DELETE claimed, never landed (admitted by a) [deleted]",
			"10 2026-11-30T03:00:08Z AcceleratorQuota team-alpha deleted [deleted] (no admitted verdict in the logs read matches it",
		},
	}, {
		name: "a forged UPDATE whose spec is not the one that lands",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("4")}.event(),
				review{sec: 6, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaAt(6, 2, alphaSpec("12"), 25),
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed", "8": "author"},
		authors:  map[uint64]string{9: "bob"},
		lines: []string{
			"7 2026-11-30T03:00:05Z mallory UPDATE claimed, never landed (admitted by a) [nvidia.com/gpu@a100 nominal 16 -> 4]",
			"9 2026-11-30T03:00:06Z bob AcceleratorQuota team-alpha written (generation 2) [nvidia.com/gpu@a100 nominal 16 -> 12]",
		},
	}, {
		name: "a forged UPDATE before a write made with the webhook off",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("4")}.event(),
				alphaAt(6, 2, alphaSpec("12"), 25),
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed"},
		authors:  map[uint64]string{8: ""},
		unjudged: []uint64{8},
		lines: []string{
			"8 2026-11-30T03:00:06Z AcceleratorQuota team-alpha written (generation 2) [nvidia.com/gpu@a100 nominal 16 -> 12] (no admitted verdict in the logs read matches it",
		},
		absent: []string{"mallory AcceleratorQuota"},
	}, {
		name: "a forged UPDATE that claims a status write (a spec left as it was)",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("16")}.event(),
				alphaAt(6, 1, alphaSpec("16"), 21),
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed"},
		hidden:   []uint64{8},
	}, {
		name: "a forged UPDATE sent after the write landed",
		evs: cat(created(),
			[]events.Event{
				alphaAt(5, 2, alphaSpec("12"), 25),
				review{sec: 6, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
			}),
		verdicts: map[string]string{"5": "author", "8": "claimed"},
		authors:  map[uint64]string{7: ""},
		unjudged: []uint64{7},
	}, {
		name: "a forged CREATE of an object that exists",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "mallory", op: "CREATE", objectUID: "alpha", new: alphaSpec("16")}.event(),
				alphaAt(6, 1, alphaSpec("16"), 21),
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed"},
		authors:  map[uint64]string{6: "alice"},
	}, {
		name: "two admitted verdicts claim the same change",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "eve", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				review{sec: 6, user: "carol", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaAt(6, 2, alphaSpec("12"), 25),
			}),
		verdicts: map[string]string{"5": "author", "7": "contested", "8": "contested"},
		authors:  map[uint64]string{9: ""},
		lines: []string{
			"7 2026-11-30T03:00:05Z eve UPDATE claimed, author not established (admitted by a; #9 is claimed by another verdict too)",
			"8 2026-11-30T03:00:06Z carol UPDATE claimed, author not established (admitted by a; #9 is claimed by another verdict too)",
			"9 2026-11-30T03:00:06Z AcceleratorQuota team-alpha written (generation 2) [nvidia.com/gpu@a100 nominal 16 -> 12] (claimed by eve at 7 and carol at 8: author not established)",
		},
		absent: []string{"landed as #9", "eve AcceleratorQuota", "carol AcceleratorQuota"},
	}, {
		name: "a forged UPDATE beside a genuine authenticated one",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "eve", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r1"}.event(),
				review{sec: 6, user: "carol", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), authenticated: true, record: "r1"}.event(),
				review{sec: 6, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaRecorded(6, 2, alphaSpec("12"), 25, "r1"),
			}),
		verdicts: map[string]string{"5": "author", "7": "outweighed", "8": "author", "9": "outweighed"},
		authors:  map[uint64]string{10: "carol"},
		lines: []string{
			"7 2026-11-30T03:00:05Z eve UPDATE claimed, outweighed (admitted by a; #10 is another request's, whose verdict weighs more",
			"8 2026-11-30T03:00:06Z carol UPDATE admitted by a, landed as #10",
			"10 2026-11-30T03:00:06Z carol AcceleratorQuota team-alpha written (generation 2)",
		},
		absent: []string{"author not established", "claimed by"},
	}, {
		name: "a forged DELETE beside a genuine authenticated one",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "carol", op: "DELETE", objectUID: "alpha", base: "20", old: alphaSpec("16"), authenticated: true}.event(),
				review{sec: 6, user: "mallory", op: "DELETE", objectUID: "alpha", base: "20", old: alphaSpec("16")}.event(),
				alphaGone(7, 20),
			}),
		verdicts: map[string]string{"5": "author", "7": "author", "8": "outweighed"},
		authors:  map[uint64]string{9: "carol"},
		absent:   []string{"author not established"},
	}, {
		name: "a forged UPDATE beside one whose record is the stored object's",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r1"}.event(),
				review{sec: 6, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r0"}.event(),
				review{sec: 6, user: "eve", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaRecorded(6, 2, alphaSpec("12"), 25, "r1"),
			}),
		verdicts: map[string]string{"5": "author", "7": "author", "8": "outweighed", "9": "outweighed"},
		authors:  map[uint64]string{10: "bob"},
		absent:   []string{"author not established"},
	}, {
		name: "an authenticated verdict whose record is not the stored object's, beside one whose record is",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r1", replica: "b"}.event(),
				review{sec: 6, user: "carol", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), authenticated: true, record: "r2"}.event(),
				alphaRecorded(6, 2, alphaSpec("12"), 25, "r1"),
			}),
		verdicts: map[string]string{"5": "author", "7": "author", "8": "outweighed"},
		authors:  map[uint64]string{9: "bob"},
	}, {
		name: "two authenticated verdicts of different requests claim the same change",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), authenticated: true, record: "r1"}.event(),
				review{sec: 6, user: "carol", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), authenticated: true, record: "r1"}.event(),
				review{sec: 6, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r1"}.event(),
				alphaRecorded(6, 2, alphaSpec("12"), 25, "r1"),
			}),
		verdicts: map[string]string{"5": "author", "7": "contested", "8": "contested", "9": "outweighed"},
		authors:  map[uint64]string{10: ""},
		lines:    []string{"(claimed by bob at 7 and carol at 8: author not established)"},
	}, {
		name: "two unauthenticated verdicts, records not the stored object's",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "eve", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r2"}.event(),
				review{sec: 6, user: "carol", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), record: "r3"}.event(),
				alphaRecorded(6, 2, alphaSpec("12"), 25, "r1"),
			}),
		verdicts: map[string]string{"5": "author", "7": "contested", "8": "contested"},
		authors:  map[uint64]string{9: ""},
		lines:    []string{"(claimed by eve at 7 and carol at 8: author not established)"},
	}, {
		name: "one request judged twice is one claimant",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), reviewUID: "r1"}.event(),
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), reviewUID: "r1"}.event(),
				alphaAt(6, 2, alphaSpec("12"), 25),
			}),
		verdicts: map[string]string{"5": "author", "7": "author", "8": "author"},
		authors:  map[uint64]string{9: "bob"},
	}, {
		name: "a judgement on a version that a status write replaced, then judged again",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaAt(5, 1, alphaSpec("16"), 21), // the conflict: the API server judges it again
				review{sec: 6, user: "bob", op: "UPDATE", objectUID: "alpha", base: "21", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				alphaAt(6, 2, alphaSpec("12"), 25),
			}),
		verdicts: map[string]string{"5": "author", "7": "claimed", "9": "author"},
		authors:  map[uint64]string{10: "bob"},
		hidden:   []uint64{8},
	}, {
		name: "a denied request changes nothing and judges no write",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("20"), denied: true}.event(),
				alphaAt(6, 2, alphaSpec("20"), 25),
			}),
		verdicts: map[string]string{"5": "author", "7": "request"},
		authors:  map[uint64]string{8: ""},
		unjudged: []uint64{8},
		lines: []string{
			"7 2026-11-30T03:00:05Z bob UPDATE request denied by a: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28 [nvidia.com/gpu@a100 nominal 16 -> 20]",
		},
	}, {
		name: "a log recorded before uids and versions",
		evs: []events.Event{
			review{sec: 3, user: "alice", op: "CREATE", new: alphaSpec("16"), noIdentity: true}.event(),
			events.QuotaUpserted(at(3), &events.Quota{Name: "team-alpha", Generation: 1, Spec: *alphaSpec("16")}),
			review{sec: 5, user: "alice", op: "DELETE", old: alphaSpec("16"), noIdentity: true}.event(),
			events.QuotaUpserted(at(6), &events.Quota{Name: "team-alpha", Generation: 2, Spec: *alphaSpec("12")}),
		},
		verdicts: map[string]string{"5": "unverified", "7": "unverified"},
		authors:  map[uint64]string{6: "", 8: ""},
		lines: []string{
			"5 2026-11-30T03:00:03Z alice CREATE admitted by a, unverified (no object uid or version recorded) [created;",
			"7 2026-11-30T03:00:05Z alice DELETE admitted by a, unverified (no object uid or version recorded) [deleted]",
		},
		absent: []string{"landed as", "matches it"},
	}, {
		name: "a log recorded before uids and versions, a status write before the change",
		evs: []events.Event{
			review{sec: 3, user: "alice", op: "CREATE", new: alphaSpec("16"), noIdentity: true}.event(),
			events.QuotaUpserted(at(3), &events.Quota{Name: "team-alpha", Generation: 1, Spec: *alphaSpec("16")}),
			review{sec: 5, user: "bob", op: "UPDATE", old: alphaSpec("16"), new: alphaSpec("12"), noIdentity: true}.event(),
			events.QuotaUpserted(at(5), &events.Quota{Name: "team-alpha", Generation: 1, Spec: *alphaSpec("16")}),
			events.QuotaUpserted(at(6), &events.Quota{Name: "team-alpha", Generation: 2, Spec: *alphaSpec("12")}),
		},
		verdicts: map[string]string{"5": "unverified", "7": "unverified"},
		authors:  map[uint64]string{6: "", 9: ""},
		hidden:   []uint64{8},
	}, {
		name: "verdicts with uids and versions, writes without",
		evs: []events.Event{
			review{sec: 3, user: "alice", op: "CREATE", objectUID: "alpha", new: alphaSpec("16")}.event(),
			events.QuotaUpserted(at(3), &events.Quota{Name: "team-alpha", Generation: 1, Spec: *alphaSpec("16")}),
		},
		verdicts: map[string]string{"5": "unverified"},
		authors:  map[uint64]string{6: ""},
		lines:    []string{"alice CREATE admitted by a, unverified (the node's writes carry no uid or version)"},
	}, {
		name: "the next version listed at a start, after a gap",
		evs: cat(created(),
			[]events.Event{
				review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12")}.event(),
				events.Started(at(10), &events.Start{Version: "test"}),
				alphaAt(10, 3, alphaSpec("12"), 40),
				events.Synced(at(10)),
			}),
		verdicts: map[string]string{"5": "author", "7": "unverified"},
		authors:  map[uint64]string{9: ""},
		lines:    []string{"bob UPDATE admitted by a, unverified (the next version was listed at a start, after a gap)"},
	}, {
		name: "verdicts of another replica: a genuine one before the write, a forged one after",
		evs: cat(created(),
			[]events.Event{alphaAt(6, 2, alphaSpec("12"), 25)}),
		other: []events.Event{
			events.ConfigChanged(t0, events.DefaultConfig()),
			review{sec: 5, user: "bob", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), replica: "b"}.event(),
			review{sec: 7, user: "mallory", op: "UPDATE", objectUID: "alpha", base: "20", old: alphaSpec("16"), new: alphaSpec("12"), replica: "b"}.event(),
		},
		verdicts: map[string]string{"5": "author", "1:2": "author", "1:3": "claimed"},
		authors:  map[uint64]string{6: "alice", 7: "bob"},
		lines: []string{
			"1:2 2026-11-30T03:00:05Z bob UPDATE admitted by b, landed as #7 [nvidia.com/gpu@a100 nominal 16 -> 12]",
			"1:3 2026-11-30T03:00:07Z mallory UPDATE claimed, never landed (admitted by b)",
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			prefix := []events.Event{
				events.ConfigChanged(t0, events.DefaultConfig()),
				events.Synced(at(1)),
				stored(at(2), &events.Quota{Name: "root", UID: "root", Generation: 1, Spec: aqtest.Root().Obj().Spec}, 10),
				stored(at(2), &events.Quota{Name: "ml-research", UID: "ml", Generation: 1,
					Spec: aqtest.Cohort("ml-research", "root").Budget("nvidia.com/gpu", "a100", "24").Obj().Spec}, 11),
			}
			args := []string{writeLog(t, append(prefix, c.evs...))}
			if c.other != nil {
				args = append(args, writeLog(t, c.other))
			}
			args = append(args, "--node", "team-alpha", "--history")
			text := run(t, args...)
			var rep struct {
				Items Trail `json:"items"`
			}
			if err := json.Unmarshal([]byte(run(t, append(args, "-o", "json")...)), &rep); err != nil {
				t.Fatal(err)
			}
			gotVerdicts, gotAuthors := map[string]string{}, map[uint64]string{}
			var unjudged []uint64
			for _, s := range rep.Items.Steps {
				switch s.What {
				case "verdict":
					gotVerdicts[stepSeq(s)] = s.Authorship
				case "write":
					gotAuthors[s.Seq] = s.User
					if s.Unjudged {
						unjudged = append(unjudged, s.Seq)
					}
				}
			}
			if fmt.Sprint(gotVerdicts) != fmt.Sprint(c.verdicts) {
				t.Errorf("verdicts %v, want %v", gotVerdicts, c.verdicts)
			}
			for seq, want := range c.authors {
				if got, ok := gotAuthors[seq]; !ok || got != want {
					t.Errorf("write #%d: author %q (shown %t), want %q", seq, got, ok, want)
				}
			}
			if fmt.Sprint(unjudged) != fmt.Sprint(c.unjudged) && (len(unjudged) > 0 || len(c.unjudged) > 0) {
				t.Errorf("unjudged writes %v, want %v", unjudged, c.unjudged)
			}
			for _, seq := range c.hidden {
				if _, ok := gotAuthors[seq]; ok {
					t.Errorf("write #%d changes no spec but the trail shows it", seq)
				}
			}
			var squeezed []string
			for _, l := range strings.Split(text, "\n") {
				squeezed = append(squeezed, strings.Join(strings.Fields(l), " "))
			}
			flat := strings.Join(squeezed, "\n")
			for _, l := range c.lines {
				if !strings.Contains(flat, l) {
					t.Errorf("the trail does not say %q:\n%s", l, text)
				}
			}
			for _, l := range c.absent {
				if strings.Contains(flat, l) {
					t.Errorf("the trail says %q:\n%s", l, text)
				}
			}
			if again := run(t, args...); again != text {
				t.Error("a second run printed other bytes")
			}
		})
	}
}
