package state

import (
	"strings"
	"testing"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// The rule of spec.goneClusters: root's alone; on root, a cluster newly
// declared gone without force is refused while it answers the plane, and
// nothing may be declared gone in workload mode.
func TestGoneClustersRules(t *testing.T) {
	s := New()
	applyAll(s, fleetConfig("east", "west", "left"), events.Synced(t0),
		quota("root", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}),
		events.MemberSeen(t0, "east", []string{"a100"}, []events.MemberCapacity{gpus("a100", "8")}),
		events.MemberLost(t0, "west", "dial tcp 127.0.0.1:1: connection refused"),
	)
	rootWith := func(gone ...v1beta1.GoneCluster) *v1beta1.AcceleratorQuotaSpec {
		return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, GoneClusters: gone}
	}
	east, eastForced, west := v1beta1.GoneCluster{Name: "east"}, v1beta1.GoneCluster{Name: "east", Force: true}, v1beta1.GoneCluster{Name: "west"}
	refusedEast := "root: spec.goneClusters declares east gone without force, but the plane still hears from it, so what it holds still counts against the fleet's budgets: " +
		"declare a cluster gone once the plane no longer reaches it (it is shut down, or its access revoked), or set force: true to forget it while it may still admit work (kubectl ome quota forget --force CLUSTER)"
	for name, c := range map[string]struct {
		spec *v1beta1.AcceleratorQuotaSpec
		want string // "" admitted
	}{
		"a cluster that answers":                   {rootWith(east), refusedEast},
		"a cluster that answers, with another":     {rootWith(west, east), refusedEast},
		"a cluster that answers, forced":           {rootWith(eastForced), ""},
		"a cluster that does not answer":           {rootWith(west), ""},
		"a cluster the plane never heard from":     {rootWith(v1beta1.GoneCluster{Name: "left"}), ""},
		"a cluster the plane does not know at all": {rootWith(v1beta1.GoneCluster{Name: "typo"}), ""},
	} {
		t.Run(name, func(t *testing.T) {
			a := s.Admit("root", c.spec)
			if c.want == "" {
				if !a.Allowed {
					t.Fatalf("refused: %s", a.Message)
				}
				return
			}
			if a.Allowed || a.Message != c.want {
				t.Fatalf("allowed=%t %q, want refused with %q", a.Allowed, a.Message, c.want)
			}
		})
	}
	// Anywhere but root: NodeKindInvalid, refused by the webhook and held
	// by the reducer.
	team := fleetTeam("root", "4", v1beta1.DistributionExplicit, share("east", "4"))
	team.GoneClusters = []v1beta1.GoneCluster{west}
	a := s.Admit("team-a", team)
	wantKind := "team-a: spec.goneClusters declares a management plane's member clusters gone, and only root carries it: remove it from this node, and declare the clusters gone on the plane's root (kubectl ome quota forget CLUSTER)"
	if a.Allowed || a.Message != wantKind || a.Denied[0].Reason != ReasonNodeKindInvalid || a.Denied[0].Subject != "goneClusters" {
		t.Errorf("goneClusters on a team: %+v, want NodeKindInvalid %q", a, wantKind)
	}
	applyAll(s, quota("team-a", team))
	if st, _ := s.NodeStatus("team-a"); st.Phase != PhaseNodeKindInvalid {
		t.Errorf("a team with goneClusters, written with the webhook off: %s, want NodeKindInvalid", st.Phase)
	}

	// Declared, it is let through later however it stands. East, forced
	// out, is forgotten: the plane no longer hears from it, so its force
	// may be taken away.
	applyAll(s, quota("root", rootWith(eastForced, west)))
	if a := s.Admit("root", rootWith(eastForced, west)); !a.Allowed {
		t.Errorf("root written again with its declarations as they stand: %s", a.Message)
	}
	if a := s.Admit("root", rootWith(east, west)); !a.Allowed {
		t.Errorf("east's force taken away once it is forgotten: %s", a.Message)
	}
	if a := s.Admit("root", rootWith(west)); !a.Allowed {
		t.Errorf("east taken back: %s", a.Message)
	}

	// Workload mode: nothing to forget.
	wl := New()
	applyAll(wl, events.ConfigChanged(t0, events.DefaultConfig()), events.Synced(t0), quota("root", &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}))
	a = wl.Admit("root", rootWith(eastForced))
	if a.Allowed || !strings.HasPrefix(a.Message, "root: spec.goneClusters declares east gone, but this quota manager runs in workload mode") {
		t.Errorf("goneClusters in workload mode: allowed=%t %q", a.Allowed, a.Message)
	}
	// A write of root that changes only goneClusters is judged: it is not
	// the same shape.
	if SameShape("root", rootWith(), rootWith(west)) {
		t.Error("a write of goneClusters reads as the same shape, and would go unjudged and unrecorded")
	}
}
