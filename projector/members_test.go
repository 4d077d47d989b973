package projector_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/planetest"
	"ome.io/quota-manager/state"
)

// rootMembers renders root's status.members as the projection writes it,
// one line per cluster, the message left out.
func rootMembers(s *state.State) []string {
	out := projector.Project(projector.FromState(s, nil, nil))
	var lines []string
	for _, m := range out.Statuses[v1beta1.RootName].Members {
		since := "-"
		if m.Since != nil {
			since = m.Since.UTC().Format("15:04")
		}
		lines = append(lines, fmt.Sprintf("%s %s reachable=%t since=%s copies=%d behind=%d raises=%d awaited=%d %s",
			m.Cluster, m.State, m.Reachable, since, m.Copies, m.CopiesBehind, m.RaisesWaiting, m.ReleasesAwaited, m.Reason))
	}
	return lines
}

// Root's status on a plane lists each member: what it holds, what it is
// behind on (the copies projector.Copies writes it, missing or made from
// an older generation), and why; a workload cluster's root lists none.
func TestRootStatusMembers(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	s := state.New()
	apply := func(evs ...events.Event) {
		for _, ev := range evs {
			ev.Seq = s.LastSeq() + 1
			s.Apply(ev)
		}
	}
	apply(aqtest.FleetEvents(t0, "6", "2",
		aqtest.Root().Obj(),
		aqtest.Cohort("ml", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(),
		aqtest.Team("team-a", "ml").Budget("nvidia.com/gpu", "a100", "4").Obj(),
		aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj(),
	)...)
	plane := planetest.New(s, "fleet")
	if err := plane.Settle(t0); err != nil {
		t.Fatal(err)
	}
	want := func(lines ...string) {
		t.Helper()
		if diff := cmp.Diff(lines, rootMembers(s)); diff != "" {
			t.Errorf("root's status.members (-want +got):\n%s", diff)
		}
	}
	want("east Member reachable=true since=09:00 copies=3 behind=0 raises=0 awaited=0 Answering",
		"west Member reachable=true since=09:00 copies=2 behind=0 raises=0 awaited=0 Answering")

	// team-b is lowered: its new generation is not on east yet; and west
	// lost its copy of ml (someone deleted it with the webhook off).
	t1 := t0.Add(time.Minute)
	b := aqtest.Team("team-b", "ml").Budget("nvidia.com/gpu", "a100", "2").Share("east", "2").Obj()
	apply(events.QuotaUpserted(t1, &events.Quota{Name: "team-b", UID: "uid-team-b", Generation: 2, Spec: b.Spec, Guarded: true,
		Holds: s.StoredHoldRecord("team-b")}))
	delete(plane.Copies["west"], "ml")
	var copies []events.MemberCopy
	for _, name := range []string{"team-a"} {
		c := plane.Copy("west", name)
		mc := events.MemberCopy{Node: name, Applied: 1, Version: c.ResourceVersion}
		for _, cb := range c.Spec.Budgets {
			mc.Budgets = append(mc.Budgets, events.CopyBudget{Resource: cb.ResourceName, Flavor: cb.ResourceFlavor, Nominal: cb.Nominal})
		}
		copies = append(copies, mc)
	}
	seen := events.MemberSeen(t1, "west", []string{"a100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
		Allocatable: resource.MustParse("2"), HighWaterMark: resource.MustParse("2")}})
	seen.Member.Copies = copies
	apply(seen)
	lines := rootMembers(s)
	want("east Member reachable=true since=09:00 copies=3 behind=1 raises=0 awaited=0 CopiesBehind",
		"west Member reachable=true since=09:00 copies=1 behind=1 raises=0 awaited=0 CopiesBehind")
	out := projector.Project(projector.FromState(s, nil, nil))
	msg := out.Statuses[v1beta1.RootName].Members[0].Message
	if !strings.HasPrefix(msg, "1 of the copies it should hold are missing or made from an older generation of their node") {
		t.Errorf("east's message: %q (%v)", msg, lines)
	}
	if ms := out.Statuses[v1beta1.RootName].Members[0]; ms.LastReport == nil || !ms.LastReport.Time.Equal(t0) {
		t.Errorf("east's last report: %v, want %s", ms.LastReport, t0)
	}
	if ms := out.Statuses[v1beta1.RootName].Members[1]; ms.LastReport == nil || !ms.LastReport.Time.Equal(t1) {
		t.Errorf("west's last report: %v, want %s", ms.LastReport, t1)
	}
	// The plane writes them again, and they read back.
	if err := plane.Settle(t1); err != nil {
		t.Fatal(err)
	}
	want("east Member reachable=true since=09:00 copies=3 behind=0 raises=0 awaited=0 Answering",
		"west Member reachable=true since=09:00 copies=2 behind=0 raises=0 awaited=0 Answering")
	// Only root lists the members.
	for name, st := range out.Statuses {
		if name != v1beta1.RootName && len(st.Members) > 0 {
			t.Errorf("%s's status lists members", name)
		}
	}

	// A workload cluster's root has none.
	w := state.New()
	for _, ev := range []events.Event{events.ConfigChanged(t0, events.DefaultConfig()), events.Synced(t0),
		events.QuotaUpserted(t0, &events.Quota{Name: "root", Generation: 1, Spec: aqtest.Root().Obj().Spec})} {
		ev.Seq = w.LastSeq() + 1
		w.Apply(ev)
	}
	if got := projector.Project(projector.FromState(w, nil, nil)).Statuses["root"].Members; got != nil {
		t.Errorf("a workload cluster's root lists members: %v", got)
	}
}
