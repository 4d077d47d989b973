package replay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

func quota(aq *v1beta1.AcceleratorQuota) *events.Quota {
	return &events.Quota{Name: aq.Name, Generation: 1, Spec: aq.Spec}
}

// eightGPUNode is the event of a Ready node of 8 A100 GPUs.
func eightGPUNode(name string) *events.Node {
	q := map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")}
	return &events.Node{Name: name, Labels: map[string]string{"gpu.product": "a100"}, Capacity: q, Allocatable: q, Ready: true}
}

// guideLog records the guide's decommission story: four A100 nodes, the
// tree, a Cohort "big" of 28 with a team, then one node deleted.
func guideLog(t *testing.T) string {
	t.Helper()
	cfg := events.DefaultConfig()
	cfg.EnrolledNamespaces = []string{"ml"}
	var evs []events.Event
	add := func(ev events.Event) { evs = append(evs, ev) }
	add(events.ConfigChanged(t0, cfg))
	add(events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}))
	for i := 1; i <= 4; i++ {
		add(events.NodeUpserted(t0, eightGPUNode(fmt.Sprintf("gpu-node-%d", i))))
	}
	add(events.Synced(t0.Add(time.Second)))
	add(events.Tick(t0.Add(time.Second)))
	for _, aq := range []*v1beta1.AcceleratorQuota{
		aqtest.Root().Obj(),
		aqtest.Cohort("ml-research", "root").Budget("nvidia.com/gpu", "a100", "24").Obj(),
		aqtest.Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "16").Obj(),
		aqtest.Team("team-beta", "ml-research").Budget("nvidia.com/gpu", "a100", "8").Borrow("4").Obj(),
		aqtest.Cohort("big", "root").Budget("nvidia.com/gpu", "a100", "28").Obj(),
		aqtest.Team("big-team", "big").Budget("nvidia.com/gpu", "a100", "20").Obj(),
	} {
		add(events.QuotaUpserted(t0.Add(2*time.Second), quota(aq)))
	}
	add(events.Deleted(t0.Add(time.Minute), events.KindNode, "gpu-node-3"))
	add(events.Tick(t0.Add(2 * time.Minute)))
	return writeLog(t, evs)
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(args, &out, &errOut); code != 0 {
		t.Fatalf("replay %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}

func TestWhyNamesTheNodeDeletion(t *testing.T) {
	dir := guideLog(t)
	got := run(t, dir, "--why", "big-team")
	want := []string{
		"big-team is Frozen since #15",
		"<- #15 Node gpu-node-3 deleted",
		"big is CapacityExceeded since #15",
		"<- the high-water mark of nvidia.com/gpu@a100 fell from 32 to 24 at #15",
		"<- installed nvidia.com/gpu@a100 went from 32 to 24: #15 Node gpu-node-3 deleted",
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("--why big-team lacks %q:\n%s", w, got)
		}
	}
}

func TestTimelineAndAt(t *testing.T) {
	dir := guideLog(t)
	tl := run(t, dir)
	for _, w := range []string{"big-team", "Ready", "CapacityExceeded", "#15 Node gpu-node-3 deleted"} {
		if !strings.Contains(tl, w) {
			t.Errorf("timeline lacks %q:\n%s", w, tl)
		}
	}
	before := run(t, dir, "--at", "14", "--state")
	after := run(t, dir, "--state")
	if !strings.Contains(before, "quota big gen=1 phase=Ready") || !strings.Contains(after, "quota big gen=1 phase=CapacityExceeded") {
		t.Fatalf("--at 14 and the end should show big Ready, then CapacityExceeded:\n%s\n---\n%s", before, after)
	}
	// By time: the deletion came a minute in.
	if got := run(t, dir, "--at", t0.Add(30*time.Second).Format(time.RFC3339), "--state"); got != before {
		t.Fatalf("--at a time before the deletion differs from --at 14")
	}
	// The same log always prints the same bytes.
	if again := run(t, dir); again != tl {
		t.Fatal("two replays of one log printed different timelines")
	}
}

func TestWhatIfHysteresis(t *testing.T) {
	dir := guideLog(t)
	// With a 30% band, losing 8 of 32 GPUs (25%) does not lower the mark:
	// big never leaves Ready and big-team is never frozen.
	got := run(t, dir, "--capacity-hysteresis-percent", "30")
	for _, w := range []string{"- ", "big", "CapacityExceeded", "big-team", "Frozen"} {
		if !strings.Contains(got, w) {
			t.Errorf("what-if output lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "\n+ ") {
		t.Errorf("what-if added transitions it should not:\n%s", got)
	}
	if same := run(t, dir, "--capacity-hysteresis-percent", "10"); !strings.Contains(same, "no transition differs") {
		t.Errorf("replaying with the recorded hysteresis changed something:\n%s", same)
	}
}

func TestObjectsAndHistory(t *testing.T) {
	dir := guideLog(t)
	objs := run(t, dir, "--objects")
	for _, w := range []string{"kind: ClusterQueue", "name: team-beta", "kind: LocalQueue", "namespace: ml"} {
		if !strings.Contains(objs, w) {
			t.Errorf("--objects lacks %q", w)
		}
	}
	// big-team is frozen at the end, and its objects stay as they were.
	if !strings.Contains(objs, "name: big-team") {
		t.Errorf("--objects lost the held node big-team:\n%s", objs)
	}
	// What if another namespace had been enrolled?
	other := run(t, dir, "--objects", "--enrolled-namespaces", "serving")
	if !strings.Contains(other, "namespace: serving") || strings.Contains(other, "namespace: ml\n") {
		t.Errorf("--objects --enrolled-namespaces serving:\n%s", other)
	}
	h := run(t, dir, "--node", "team-beta")
	if !strings.Contains(h, "AcceleratorQuota team-beta written") || !strings.Contains(h, "-> Ready") {
		t.Errorf("history:\n%s", h)
	}
	js := run(t, dir, "--why", "big-team", "-o", "json")
	if !strings.Contains(js, `"apiVersion": "replay.ome.io/v1alpha1"`) {
		t.Errorf("json:\n%s", js)
	}
}

func TestUsageErrors(t *testing.T) {
	for args, want := range map[string]string{
		"":                      "give the event log folder",
		"d e":                   "only --node NAME --history reads more than one",
		"d --history":           "give --node NAME",
		"d --at yesterday":      "neither a sequence number nor an RFC 3339 time",
		"d --why a --state":     "separate views",
		"d -o yaml":             "-o must be text or json",
		"d --max-tree-depth -1": "--max-tree-depth must be 0",
	} {
		var out, errOut bytes.Buffer
		code := Main(strings.Fields(args), &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), want) {
			t.Errorf("replay %s: exit %d, stderr %q; want 2 and %q", args, code, errOut.String(), want)
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{t.TempDir() + "/missing"}, &out, &errOut); code != 1 {
		t.Errorf("a missing folder: exit %d (%s)", code, errOut.String())
	}
}

// On a management plane's log, --why names the policy behind a team's
// shares, each member's mark and the report that brought it, and says
// that a member that stopped answering keeps its mark.
func TestWhyExplainsAShare(t *testing.T) {
	cfg := events.DefaultConfig()
	cfg.Mode, cfg.Members = events.ModeManagement, []string{"east", "west"}
	gpus := func(n string) []events.MemberCapacity {
		q := resource.MustParse(n)
		return []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: q, HighWaterMark: q}}
	}
	evs := []events.Event{events.ConfigChanged(t0, cfg), events.Synced(t0),
		events.MemberSeen(t0, "east", []string{"a100"}, gpus("6")),
		events.MemberSeen(t0, "west", []string{"a100"}, gpus("2"))}
	for _, aq := range []*v1beta1.AcceleratorQuota{
		aqtest.Root().Obj(),
		aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "8").Obj(),
		aqtest.Team("team-b", "root").Budget("nvidia.com/gpu", "a100", "3").Share("east", "3").Obj(),
	} {
		evs = append(evs, events.QuotaUpserted(t0, quota(aq)))
	}
	evs = append(evs, events.MemberSeen(t0.Add(time.Minute), "west", []string{"a100"}, gpus("4")),
		events.MemberLost(t0.Add(2*time.Minute), "west", "dial tcp: i/o timeout"))
	dir := writeLog(t, evs)
	got := run(t, dir, "--why", "team-a")
	for _, w := range []string{
		"team-a's budget nvidia.com/gpu@a100 is split Proportional among the member clusters: east=5, west=3",
		"<- east's high-water mark of nvidia.com/gpu@a100 is 6, member cluster east reported high-water marks nvidia.com/gpu@a100=6 at #3",
		"<- west's high-water mark of nvidia.com/gpu@a100 is 4, member cluster west reported high-water marks nvidia.com/gpu@a100=4 at #8; it does not answer (dial tcp: i/o timeout), so it keeps that mark and its share",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("--why team-a lacks %q:\n%s", w, got)
		}
	}
	if got := run(t, dir, "--why", "team-b"); !strings.Contains(got, "is split Explicit among the member clusters: east=3") || !strings.Contains(got, "<- as written in the budget's perCluster") {
		t.Errorf("--why team-b:\n%s", got)
	}
}

// On a plane whose members come from its inventory, --why names the
// last cluster that joined or left the fleet: the change that made the
// shares what they are.
func TestWhyNamesTheMembershipChange(t *testing.T) {
	cfg := events.DefaultConfig()
	cfg.Mode, cfg.Origin = events.ModeManagement, "fleet"
	gpus := func(n string) []events.MemberCapacity {
		q := resource.MustParse(n)
		return []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: q, HighWaterMark: q}}
	}
	in := func(c string) events.Event {
		return events.MembershipChanged(t0, c, events.Membership{Member: true, Source: "ClusterProfile fleet/" + c, Health: "True"})
	}
	evs := []events.Event{events.ConfigChanged(t0, cfg), in("east"), in("west"), events.Synced(t0),
		events.MemberSeen(t0, "east", []string{"a100"}, gpus("8")),
		events.MemberSeen(t0, "west", []string{"a100"}, gpus("8"))}
	for _, aq := range []*v1beta1.AcceleratorQuota{
		aqtest.Root().Obj(),
		aqtest.Team("team-a", "root").Budget("nvidia.com/gpu", "a100", "9").Obj(),
	} {
		evs = append(evs, events.QuotaUpserted(t0, quota(aq)))
	}
	evs = append(evs, in("south"), events.MemberSeen(t0, "south", []string{"a100"}, gpus("8")),
		// A health update of a member that stays is not a change of the fleet.
		events.MembershipChanged(t0, "east", events.Membership{Member: true, Source: "ClusterProfile fleet/east", Health: "False", Message: "Probe: no answer"}))
	dir := writeLog(t, evs)
	got := run(t, dir, "--why", "team-a")
	for _, w := range []string{
		"team-a's budget nvidia.com/gpu@a100 is split Proportional among the member clusters: east=3, south=3, west=3",
		"<- the fleet is east, south, west since #9: member cluster south is in the fleet (ClusterProfile fleet/south)",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("--why team-a lacks %q:\n%s", w, got)
		}
	}
	evs = append(evs, events.MembershipChanged(t0, "west", events.Membership{Source: "ClusterProfile fleet/west", Message: "its ClusterProfile fleet/west was deleted"}))
	got = run(t, writeLog(t, evs), "--why", "team-a")
	for _, w := range []string{
		"is split Proportional among the member clusters: east=5, south=4",
		"<- the fleet is east, south since #12: member cluster west left the fleet: its ClusterProfile fleet/west was deleted",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("--why team-a after west left lacks %q:\n%s", w, got)
		}
	}
}
