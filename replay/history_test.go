package replay

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
)

// writeLog writes evs, numbered from 1, to a new log.
func writeLog(t *testing.T, evs []events.Event) string {
	t.Helper()
	return writeLogAt(t, t.TempDir(), evs)
}

// writeLogAt writes evs, numbered from 1, to a new log in dir.
func writeLogAt(t *testing.T, dir string, evs []events.Event) string {
	t.Helper()
	l, err := store.Open(dir, store.Options{Sync: store.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
		if err := l.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func specOf(aq *v1beta1.AcceleratorQuota) *v1beta1.AcceleratorQuotaSpec { return &aq.Spec }

// stored is an AcceleratorQuota event at a resourceVersion.
func stored(t time.Time, q *events.Quota, version uint64) events.Event {
	ev := events.QuotaUpserted(t, q)
	ev.Version = version
	return ev
}

// twoReplicas are the logs of two replicas of one cluster: the guide's
// tree, team-alpha created through replica a, its raise to 20 denied by
// replica b, then its raise to 18 admitted by a, which freezes nothing but
// is seen by both; the API server sent the last request to both replicas.
func twoReplicas(t *testing.T) (string, string) {
	t.Helper()
	alpha16 := aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "16").Obj()
	alpha20 := aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "20").Obj()
	alpha18 := aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "18").Borrow("2").Obj()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var a []events.Event
	a = append(a, events.ConfigChanged(t0, events.DefaultConfig()),
		events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}))
	for _, n := range []string{"gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"} {
		a = append(a, events.NodeUpserted(t0, eightGPUNode(n)))
	}
	a = append(a, events.Synced(at(1)))
	for _, aq := range []*v1beta1.AcceleratorQuota{aqtest.Root().Obj(), aqtest.Cohort("ml-research", "root").Budget("nvidia.com/gpu", "a100", "24").Obj()} {
		a = append(a, events.QuotaUpserted(at(2), quota(aq)))
	}
	a = append(a,
		events.Verdicted(at(3), "team-alpha", &events.Verdict{UID: "u1", User: "alice", Operation: "CREATE", Allowed: true, New: specOf(alpha16), Replica: "a", ObjectUID: "alpha"}),
		stored(at(3), &events.Quota{Name: "team-alpha", UID: "alpha", Generation: 1, Spec: alpha16.Spec}, 100),
		// 5: the raise to 20, judged by b, lands nowhere.
		events.Verdicted(at(7), "team-alpha", &events.Verdict{UID: "u3", User: "bob", Operation: "UPDATE", Allowed: true, Old: specOf(alpha16), New: specOf(alpha18), Replica: "a",
			ObjectUID: "alpha", Base: "100"}),
		stored(at(7), &events.Quota{Name: "team-alpha", UID: "alpha", Generation: 2, Spec: alpha18.Spec}, 105),
		events.Verdicted(at(9), "team-beta", &events.Verdict{UID: "u4", User: "carol", Operation: "CREATE", Allowed: true, New: specOf(aqtest.Team("team-beta", "ml-research").Obj()), Replica: "a"}),
	)
	b := []events.Event{
		events.ConfigChanged(t0, events.DefaultConfig()),
		events.Verdicted(at(5), "team-alpha", &events.Verdict{UID: "u2", User: "bob", Groups: []string{"ml"}, Operation: "UPDATE", Code: 403,
			Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28", Old: specOf(alpha16), New: specOf(alpha20), Replica: "b"}),
		// The same request as u3, judged by b too: counted once.
		events.Verdicted(at(7), "team-alpha", &events.Verdict{UID: "u3", User: "bob", Operation: "UPDATE", Allowed: true, Old: specOf(alpha16), New: specOf(alpha18), Replica: "b",
			ObjectUID: "alpha", Base: "100"}),
	}
	return writeLog(t, a), writeLog(t, b)
}

func TestTrailMergesReplicas(t *testing.T) {
	a, b := twoReplicas(t)
	got := run(t, a, b, "--node", "team-alpha", "--history")
	want := `SEQ  TIME                  WHO    team-alpha
10   2026-11-30T03:00:03Z  alice  CREATE admitted by a, landed as #11 [created; role ClusterQueue; parent ml-research; nvidia.com/gpu@a100 nominal 16]
11   2026-11-30T03:00:03Z  alice  AcceleratorQuota team-alpha written (generation 1) [created; role ClusterQueue; parent ml-research; nvidia.com/gpu@a100 nominal 16]
11   2026-11-30T03:00:03Z         team-alpha Pending -> Ready
1:2  2026-11-30T03:00:05Z  bob    UPDATE request denied by b: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28 [nvidia.com/gpu@a100 nominal 16 -> 20]
12   2026-11-30T03:00:07Z  bob    UPDATE admitted by a, landed as #13 [nvidia.com/gpu@a100 nominal 16 -> 18; nvidia.com/gpu@a100 borrowingLimit <none> -> 2]
13   2026-11-30T03:00:07Z  bob    AcceleratorQuota team-alpha written (generation 2) [nvidia.com/gpu@a100 nominal 16 -> 18; nvidia.com/gpu@a100 borrowingLimit <none> -> 2]
(SEQ N:M is event M of the N-th other log; verdicts of one admission request are counted once)
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The same bytes every time, and the JSON view holds the same steps.
	if again := run(t, a, b, "--node", "team-alpha", "--history"); again != got {
		t.Error("a second run printed other bytes")
	}
	var rep struct {
		Items Trail `json:"items"`
	}
	if err := json.Unmarshal([]byte(run(t, a, b, "--node", "team-alpha", "--history", "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if n := len(rep.Items.Steps); n != 6 || rep.Items.Steps[3].User != "bob" || rep.Items.Steps[3].Verdict != "denied" || rep.Items.Steps[3].Groups[0] != "ml" {
		t.Errorf("json steps %+v", rep.Items.Steps)
	}
	// One log alone misses the denial that the other replica gave.
	if alone := run(t, a, "--node", "team-alpha", "--history"); strings.Contains(alone, "denied") {
		t.Errorf("the first log alone shows a denial it does not hold:\n%s", alone)
	}
}

// A replica keeps the webhook's verdicts in a log of their own inside its
// folder (store.VerdictsDir), apart from the events that decide state: the
// trail of that folder alone shows them, placed by time and numbered in
// that log, and still ties each admitted verdict to the write it allowed.
func TestTrailReadsTheLogOfVerdicts(t *testing.T) {
	a, b := twoReplicas(t)
	// a's events as a replica records them now: its verdicts, and b's
	// denial, in its log of verdicts.
	var main, verdicts []events.Event
	for _, dir := range []string{a, b} {
		_, err := store.Read(dir, 0, func(ev events.Event) error {
			switch {
			case ev.Kind != events.KindVerdict:
				if dir == a {
					main = append(main, ev)
				}
			case dir == a || !ev.Verdict.Allowed:
				verdicts = append(verdicts, ev)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(verdicts, func(x, y events.Event) int { return x.Time.Compare(y.Time) })
	dir := writeLog(t, main)
	writeLogAt(t, filepath.Join(dir, store.VerdictsDir), verdicts)
	got := run(t, dir, "--node", "team-alpha", "--history")
	want := `SEQ  TIME                  WHO    team-alpha
1:1  2026-11-30T03:00:03Z  alice  CREATE admitted by a, landed as #10 [created; role ClusterQueue; parent ml-research; nvidia.com/gpu@a100 nominal 16]
10   2026-11-30T03:00:03Z  alice  AcceleratorQuota team-alpha written (generation 1) [created; role ClusterQueue; parent ml-research; nvidia.com/gpu@a100 nominal 16]
10   2026-11-30T03:00:03Z         team-alpha Pending -> Ready
1:2  2026-11-30T03:00:05Z  bob    UPDATE request denied by b: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28 [nvidia.com/gpu@a100 nominal 16 -> 20]
1:3  2026-11-30T03:00:07Z  bob    UPDATE admitted by a, landed as #11 [nvidia.com/gpu@a100 nominal 16 -> 18; nvidia.com/gpu@a100 borrowingLimit <none> -> 2]
11   2026-11-30T03:00:07Z  bob    AcceleratorQuota team-alpha written (generation 2) [nvidia.com/gpu@a100 nominal 16 -> 18; nvidia.com/gpu@a100 borrowingLimit <none> -> 2]
(SEQ N:M is event M of the N-th other log (those given after the first, then the logs of verdicts inside each); verdicts of one admission request are counted once)
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// With b given too, which holds the same denial: shown once.
	if got := run(t, dir, b, "--node", "team-alpha", "--history"); strings.Count(got, "request denied") != 1 {
		t.Errorf("with b given, the denial is not shown once:\n%s", got)
	}
}

// A write listed at start is marked so; a change written after Synced with
// no admitted verdict before it is flagged as unjudged.
func TestTrailFlagsUnjudgedWrites(t *testing.T) {
	beta8 := aqtest.Team("team-beta", "root").Budget("nvidia.com/gpu", "a100", "8").Obj()
	beta6 := aqtest.Team("team-beta", "root").Budget("nvidia.com/gpu", "a100", "6").Obj()
	dir := writeLog(t, []events.Event{
		events.ConfigChanged(t0, events.DefaultConfig()),
		events.QuotaUpserted(t0, quota(aqtest.Root().Obj())),
		events.QuotaUpserted(t0, quota(beta8)),
		events.Synced(t0),
		events.QuotaUpserted(t0.Add(time.Minute), &events.Quota{Name: "team-beta", Generation: 2, Spec: beta6.Spec}),
	})
	var rep struct {
		Items Trail `json:"items"`
	}
	if err := json.Unmarshal([]byte(run(t, dir, "--node", "team-beta", "--history", "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	var writes []TrailStep
	for _, s := range rep.Items.Steps {
		if s.What == "write" {
			writes = append(writes, s)
		}
	}
	if len(writes) != 2 || !writes[0].Listed || writes[0].Unjudged || writes[1].Listed || !writes[1].Unjudged {
		t.Errorf("writes %+v: want the first listed, the second unjudged", writes)
	}
	if text := run(t, dir, "--node", "team-beta", "--history"); !strings.Contains(text, "(listed at start)") || !strings.Contains(text, "written while the webhook was off") {
		t.Errorf("history:\n%s", text)
	}
}

// A change of nothing the rules read (a borrowingLimit's amount) is
// admitted by the webhook without judging: it is not flagged as unjudged.
func TestTrailDoesNotFlagWritesTheRulesDoNotRead(t *testing.T) {
	lend4 := aqtest.Team("team-beta", "root").Budget("nvidia.com/gpu", "a100", "8").Obj()
	four, six := resource.MustParse("4"), resource.MustParse("6")
	lend4.Spec.Budgets[0].BorrowingLimit = &four
	lend6 := lend4.DeepCopy()
	lend6.Spec.Budgets[0].BorrowingLimit = &six
	dir := writeLog(t, []events.Event{
		events.ConfigChanged(t0, events.DefaultConfig()),
		events.QuotaUpserted(t0, quota(aqtest.Root().Obj())),
		events.QuotaUpserted(t0, quota(lend4)),
		events.Synced(t0),
		events.QuotaUpserted(t0.Add(time.Minute), &events.Quota{Name: "team-beta", Generation: 2, Spec: lend6.Spec}),
	})
	text := run(t, dir, "--node", "team-beta", "--history")
	if !strings.Contains(text, "borrowingLimit 4 -> 6") || strings.Contains(text, "written while the webhook was off") {
		t.Errorf("history:\n%s", text)
	}
}
