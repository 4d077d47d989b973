// Package planetest plays, for tests without a cluster, what a leading
// management plane does around its state: it takes the lead, puts the
// copies finalizer and each hold record the state asks for on the plane's
// teams, writes the copies projector.Copies computes to each member that
// answers, conditional on the version each was planned from, and reads
// them back as Member events, until nothing moves.
package planetest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// Plane is a plane's state and what its members hold of its copies.
type Plane struct {
	S      *state.State
	Origin string
	// Copies are, per member, the copies it holds, by node.
	Copies map[string]map[string]*v1beta1.AcceleratorQuota
	// Writes counts the writes made to members.
	Writes int
	rv     int
	seq    uint64
}

// New wraps s, whose members hold no copies yet.
func New(s *state.State, origin string) *Plane {
	return &Plane{S: s, Origin: origin, Copies: map[string]map[string]*v1beta1.AcceleratorQuota{}, seq: s.LastSeq()}
}

func (p *Plane) apply(ev events.Event) {
	p.seq++
	ev.Seq = p.seq
	p.S.Apply(ev)
}

// Settle takes the lead (if the state does not lead) and plays the plane's
// writes until nothing moves; it fails after 50 rounds.
func (p *Plane) Settle(t time.Time) error {
	if p.S.Mark() == "" {
		ev := events.LeadershipChanged(t, "planetest", events.LeadershipAcquired)
		ev.Leadership.Term, ev.Leadership.Nonce = 1, "test"
		p.apply(ev)
	}
	for range 50 {
		if !p.round(t) {
			return nil
		}
	}
	return fmt.Errorf("the plane does not settle in 50 rounds")
}

// round is one pass: plane writes, member writes, reads back. It reports
// whether anything was written.
func (p *Plane) round(t time.Time) bool {
	moved := false
	for _, nv := range p.S.Nodes() {
		if nv.Spec.Role != v1beta1.RoleClusterQueue {
			continue
		}
		rec, want := p.S.HoldRecord(nv.Name)
		guarded := p.S.Guarded(nv.Name)
		if !want && guarded {
			continue
		}
		if !want {
			rec = p.S.StoredHoldRecord(nv.Name)
		}
		p.rv++
		ev := events.QuotaUpserted(t, &events.Quota{Name: nv.Name, UID: nv.UID, Generation: nv.Generation, Spec: *nv.Spec,
			Deleting: nv.Deleting, Guarded: true, Holds: rec})
		ev.Version = uint64(p.rv)
		p.apply(ev)
		moved = true
	}
	nodes := projector.FleetFromState(p.S)
	for _, mv := range p.S.Members() {
		if !mv.Reachable {
			continue
		}
		if p.write(mv.Name, projector.Copies(nodes, mv.Name, p.Origin)) {
			moved = true
		}
	}
	for _, mv := range p.S.Leaving() {
		if mv.Reachable && p.write(mv.Name, projector.MemberCopies{}) {
			moved = true
		}
	}
	for _, mv := range append(p.S.Members(), p.S.Leaving()...) {
		if mv.Reachable {
			p.read(t, mv)
		}
	}
	return moved
}

// write brings member's copies to want as a copier would: a write only
// where the copy differs, refused when planned from another version; a
// sweep of the origin's copies neither wanted nor held.
func (p *Plane) write(member string, want projector.MemberCopies) bool {
	have := p.Copies[member]
	if have == nil {
		have = map[string]*v1beta1.AcceleratorQuota{}
		p.Copies[member] = have
	}
	moved := false
	wanted := map[string]bool{}
	for _, c := range want.Copies {
		wanted[c.Name] = true
		cur := have[c.Name]
		if cur != nil && c.ResourceVersion != "" && cur.ResourceVersion != c.ResourceVersion {
			continue // planned from an older read: the member refuses it
		}
		if cur != nil && equality.Semantic.DeepEqual(cur.Spec, c.Spec) && maps.Equal(cur.Annotations, c.Annotations) {
			continue
		}
		n := c.DeepCopy()
		p.rv++
		n.ResourceVersion = strconv.Itoa(p.rv)
		have[c.Name] = n
		p.Writes++
		moved = true
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if !wanted[name] && !slices.Contains(want.Held, name) {
			delete(have, name)
			p.Writes++
			moved = true
		}
	}
	return moved
}

// read is the member's source publishing what it holds.
func (p *Plane) read(t time.Time, mv state.MemberView) {
	var capacity []events.MemberCapacity
	for _, c := range mv.Capacity {
		capacity = append(capacity, events.MemberCapacity{Resource: c.Resource, Flavor: c.Flavor,
			Allocatable: c.Allocatable.Quantity(), HighWaterMark: c.HighWaterMark.Quantity()})
	}
	ev := events.MemberSeen(t, mv.Name, mv.Flavors, capacity)
	for _, name := range slices.Sorted(maps.Keys(p.Copies[mv.Name])) {
		aq := p.Copies[mv.Name][name]
		mc := events.MemberCopy{Node: name, Version: aq.ResourceVersion}
		mc.Applied, _ = strconv.ParseInt(aq.Annotations[v1beta1.SourceGenerationAnnotation], 10, 64)
		for _, b := range aq.Spec.Budgets {
			cb := events.CopyBudget{Resource: b.ResourceName, Flavor: b.ResourceFlavor, Nominal: b.Nominal}
			if b.BorrowingLimit != nil {
				cb.BorrowingLimit = *b.BorrowingLimit
			}
			mc.Budgets = append(mc.Budgets, cb)
		}
		slices.SortFunc(mc.Budgets, func(a, b events.CopyBudget) int {
			return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Flavor, b.Flavor))
		})
		ev.Member.Copies = append(ev.Member.Copies, mc)
	}
	p.apply(ev)
}

// Copy is member's copy of node as written; nil when it holds none.
func (p *Plane) Copy(member, node string) *v1beta1.AcceleratorQuota {
	return p.Copies[member][node]
}
