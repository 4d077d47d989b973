package state

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// rosterLine renders an entry of the roster in one line, the message
// left out.
func rosterLine(e RosterEntry) string {
	return fmt.Sprintf("%s %s reachable=%t reported=%t splitOut=%t declared=%t copies=%d raises=%d awaited=%d %s",
		e.Name, e.State, e.Reachable, e.Reported, e.SplitOut, e.Declared, e.Copies, e.RaisesWaiting, e.ReleasesAwaited, e.Reason)
}

func rosterOf(s *State) (lines []string, msgs map[string]string) {
	msgs = map[string]string{}
	for _, e := range s.Roster() {
		lines = append(lines, rosterLine(e))
		msgs[e.Name] = e.Message
	}
	return lines, msgs
}

func wantRoster(t *testing.T, s *State, want ...string) map[string]string {
	t.Helper()
	got, msgs := rosterOf(s)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the roster (-want +got):\n%s\nmessages: %v", diff, msgs)
	}
	return msgs
}

func wantIn(t *testing.T, what, got string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Errorf("%s: %q, want it to contain %q", what, got, p)
		}
	}
}

// The members at a glance through a move while west is cut off: east's
// raise waits for west, west holds east back, and says how to forget it;
// declared gone, west is forgotten (it does not answer), its copy no
// longer counts, and east's raise goes.
func TestRosterThroughAMoveAndAForget(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("5"), "west": gpuAmount("4")}))
	w.settle()
	wantRoster(t, w.st,
		"east Member reachable=true reported=true splitOut=false declared=false copies=1 raises=0 awaited=0 Answering",
		"west Member reachable=true reported=true splitOut=false declared=false copies=1 raises=0 awaited=0 Answering")
	if got := w.st.FleetHeld("root", holdPair); got != gpuAmount("9") {
		t.Errorf("held under root: %s, want 9", got)
	}

	w.now = w.now.Add(time.Minute)
	w.reach["west"] = false
	w.report("west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("6"), "west": gpuAmount("3")}))
	for range 4 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("east")
	}
	msgs := wantRoster(t, w.st,
		"east Member reachable=true reported=true splitOut=false declared=false copies=1 raises=1 awaited=0 RaisesWaiting",
		"west Member reachable=false reported=true splitOut=false declared=false copies=1 raises=0 awaited=1 ClusterUnreachable")
	wantIn(t, "east's message", msgs["east"], "1 raise(s) of its copies wait, first fleet-a: raise of nvidia.com/gpu@a100 from 5 to 6: waits for west to release 1")
	wantIn(t, "west's message", msgs["west"], "the plane does not hear from it, so its shares and copies stay as they were: the link is cut",
		"1 raise(s) of other members' copies wait for it to release what it may hold above its share, first east's copy of fleet-a (nvidia.com/gpu@a100 from 5 to 6)",
		"kubectl ome quota forget west")
	west := w.st.Roster()[1]
	if !west.Since.Equal(w.now) || !west.LastReport.Equal(t0) {
		t.Errorf("west's since %s and last report %s, want %s (when it stopped answering) and %s", west.Since, west.LastReport, w.now, t0)
	}
	if got := w.st.FleetHeld("fleet-a", holdPair); got != gpuAmount("9") {
		t.Errorf("held of fleet-a while west may hold 4: %s, want 9", got)
	}

	// West declared gone: it does not answer, so it is forgotten, and
	// what it may hold no longer counts. Its share in fleet-a's perCluster
	// now names a cluster that is no member: the team is held as it is
	// until an admin moves the share.
	w.now = w.now.Add(time.Minute)
	w.putNode("root", v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, GoneClusters: []v1beta1.GoneCluster{{Name: "west"}}})
	msgs = wantRoster(t, w.st,
		"east Member reachable=true reported=true splitOut=false declared=false copies=1 raises=0 awaited=0 Answering",
		"west Gone reachable=false reported=false splitOut=false declared=false copies=0 raises=0 awaited=0 ClusterGone")
	wantIn(t, "west's message", msgs["west"], "declares it gone: the plane forgot it", "kubectl ome quota forget --undo west")
	if gone := w.st.Roster()[1]; !gone.Since.Equal(w.now) {
		t.Errorf("west forgotten since %s, want %s", gone.Since, w.now)
	}
	if got := w.st.FleetHeld("fleet-a", holdPair); got != gpuAmount("5") {
		t.Errorf("held of fleet-a once west is forgotten: %s, want 5 (west's copy no longer counts)", got)
	}
	if got := splitOf(w.st, "fleet-a"); !strings.Contains(got, "perCluster names west, which is not a member cluster") {
		t.Errorf("fleet-a with a share on west, forgotten: %s", got)
	}
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("6")}))
	for range 4 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if w.flight[i].member != "west" {
				w.land(i)
			}
		}
		w.inform("fleet-a")
		w.report("east")
	}
	if got := w.copyOn("east", "fleet-a"); got != "6" {
		t.Errorf("east once west is forgotten and its share moved: %s, want 6\n%s", got, w.dump())
	}
	if got := w.st.FleetHeld("fleet-a", holdPair); got != gpuAmount("6") {
		t.Errorf("held of fleet-a: %s, want 6", got)
	}
}

// A member that never reported waits in the splits, and is split out once
// its grace passes; one whose access the plane refused says so by the
// refusal's word; one that left holding copies, and one declared gone
// that still answers, each say where they stand and what to do.
func TestRosterReasons(t *testing.T) {
	s := New()
	c := events.DefaultConfig()
	c.Mode, c.Origin, c.MemberGrace.Duration = events.ModeManagement, "fleet", 5*time.Minute
	applyAll(s, events.ConfigChanged(t0, c),
		events.MembershipChanged(t0, "east", events.Membership{Member: true, Source: "ConfigMap ome/members"}),
		events.MembershipChanged(t0, "new", events.Membership{Member: true, Source: "ClusterProfile fleet/new", Health: "Unknown", Message: "NotYetReported: no lease"}),
		events.MembershipChanged(t0, "locked", events.Membership{Member: true, Source: "ConfigMap ome/members"}),
		events.MembershipChanged(t0, "west", events.Membership{Member: true, Source: "ConfigMap ome/members"}),
		events.Synced(t0),
		quota("root", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
		events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}),
		events.MemberLost(t0, "locked", "KubeconfigRefused: Secret ome/locked-kubeconfig, key kubeconfig, for member locked: user \"u\" sets tokenFile"),
		func() events.Event {
			ev := events.MemberSeen(t0, "west", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")})
			ev.Member.Copies = []events.MemberCopy{{Node: "fleet-a", Applied: 1, Version: "3"}, {Node: "fleet-b", Applied: 1, Version: "4"}}
			return ev
		}(),
	)
	msgs := wantRoster(t, s,
		"east Member reachable=true reported=true splitOut=false declared=false copies=0 raises=0 awaited=0 Answering",
		"locked Member reachable=false reported=false splitOut=false declared=false copies=0 raises=0 awaited=0 KubeconfigRefused",
		"new Member reachable=false reported=false splitOut=false declared=false copies=0 raises=0 awaited=0 NotReported",
		"west Member reachable=true reported=true splitOut=false declared=false copies=2 raises=0 awaited=0 Answering")
	wantIn(t, "new's message", msgs["new"], "it has never reported: the fleet's Proportional splits wait for it until it does, or for the member grace (5m0s) at most",
		"not heard from yet", "its inventory (ClusterProfile fleet/new) reports its control plane healthy Unknown: NotYetReported: no lease")
	wantIn(t, "locked's message", msgs["locked"], "KubeconfigRefused: Secret ome/locked-kubeconfig")

	// The grace passes (a tick tells the time): both are split out; the
	// refused one keeps its own reason.
	applyAll(s, events.Tick(t0.Add(6*time.Minute)))
	msgs = wantRoster(t, s,
		"east Member reachable=true reported=true splitOut=false declared=false copies=0 raises=0 awaited=0 Answering",
		"locked Member reachable=false reported=false splitOut=true declared=false copies=0 raises=0 awaited=0 KubeconfigRefused",
		"new Member reachable=false reported=false splitOut=true declared=false copies=0 raises=0 awaited=0 SplitOut",
		"west Member reachable=true reported=true splitOut=false declared=false copies=2 raises=0 awaited=0 Answering")
	wantIn(t, "new's message", msgs["new"], "the member grace (5m0s) has passed: the fleet's Proportional splits leave it out until it reports")

	// West leaves, refused as a duplicate, while it still holds copies;
	// east is declared gone without force while it answers (as when the
	// webhook is off).
	t1 := t0.Add(7 * time.Minute)
	applyAll(s, events.MembershipChanged(t1, "west", events.Membership{Source: "ConfigMap ome/members", Message: "DuplicateCluster: the entry west names the same cluster as east"}),
		events.QuotaUpserted(t1, &events.Quota{Name: "root", Generation: 2, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, GoneClusters: []v1beta1.GoneCluster{{Name: "east"}}}}))
	msgs = wantRoster(t, s,
		"east Member reachable=true reported=true splitOut=false declared=true copies=0 raises=0 awaited=0 StillAnswering",
		"locked Member reachable=false reported=false splitOut=true declared=false copies=0 raises=0 awaited=0 KubeconfigRefused",
		"new Member reachable=false reported=false splitOut=true declared=false copies=0 raises=0 awaited=0 SplitOut",
		"west Leaving reachable=true reported=true splitOut=false declared=false copies=2 raises=0 awaited=0 ClusterLeaving")
	wantIn(t, "west's message", msgs["west"], "it left the fleet (DuplicateCluster: the entry west names the same cluster as east) and still holds 2 copies of the plane's nodes: the plane deletes them")
	wantIn(t, "east's message", msgs["east"], "declares it gone without force, but it still answers the plane", "kubectl ome quota forget --force east")

	// East stops answering: it is forgotten; west, cut off, says how to
	// release its copies.
	applyAll(s, events.MemberLost(t1, "east", "dial tcp: connection refused"), events.MemberLost(t1, "west", "dial tcp: i/o timeout"))
	msgs = wantRoster(t, s,
		"locked Member reachable=false reported=false splitOut=true declared=false copies=0 raises=0 awaited=0 KubeconfigRefused",
		"new Member reachable=false reported=false splitOut=true declared=false copies=0 raises=0 awaited=0 SplitOut",
		"west Leaving reachable=false reported=true splitOut=false declared=false copies=2 raises=0 awaited=0 ClusterLeaving",
		"east Gone reachable=false reported=false splitOut=false declared=false copies=0 raises=0 awaited=0 ClusterGone")
	wantIn(t, "west's message", msgs["west"], "the plane does not reach it to delete them (dial tcp: i/o timeout)", "kubectl ome quota release --origin fleet", "kubectl ome quota forget west")

	// Workload mode has no roster.
	if r := New().Roster(); r != nil {
		t.Errorf("a workload state's roster: %v", r)
	}
}
