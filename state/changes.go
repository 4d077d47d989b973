package state

import (
	"slices"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// Changes says which nodes' projection the events applied since the last
// TakeChanges may have changed, like raft's Ready(): the shell re-projects
// and compares only those. A node's projection reads its spec, generation,
// phase and message, its team's usage, and for root the capacity; the
// configuration (enrolled namespaces, cover resources) is read by all.
type Changes struct {
	// All is set when every node's projection may have changed: the
	// configuration changed, or the Synced marker made the state whole.
	All bool
	// Nodes names the nodes whose projection may have changed, sorted; a
	// node deleted since is named too (its objects go).
	Nodes []string
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return !c.All && len(c.Nodes) == 0 }

// TakeChanges returns what changed since the last call and forgets it.
// It costs O(changed nodes).
func (s *State) TakeChanges() Changes {
	c := Changes{All: s.changedAll}
	if len(s.changed) > 0 {
		c.Nodes = sortedKeys(s.changed)
		clear(s.changed)
	}
	s.changedAll = false
	return c
}

// changedNode records that name's projection may have changed; on a
// plane, root's too: its status.members reads every node's copies, plans,
// waits, phase and generation (Roster, projector.RosterOf).
func (s *State) changedNode(name string) {
	s.changedOwn(name)
	if s.fleet != nil && name != v1beta1.RootName {
		s.changedOwn(v1beta1.RootName)
	}
}

// changedOwn records that name's projection may have changed, and no
// other's: on a plane, for what only the node's own status shows (its
// members' usage).
func (s *State) changedOwn(name string) {
	if s.changed == nil {
		s.changed = map[string]struct{}{}
	}
	s.changed[name] = struct{}{}
	if m := s.members[name]; m != nil {
		m.rev = s.seq
	}
}

// Revision is the sequence number of the last event that may have changed
// what the node's projection reads: its spec and generation, its phase and
// message, its team's usage, root's capacity, the configuration, and the
// applier's outcome on it; false for a node the state does not hold. It
// only grows. The shell's periodic full comparison skips a node whose
// Revision, and whose cached objects, are those it last confirmed in place
// (manager/shell.go). It is the same in a replay: a sequence number, no
// clock.
func (s *State) Revision(name string) (uint64, bool) {
	m := s.members[name]
	if m == nil {
		return 0, false
	}
	return max(m.rev, s.revAll), true
}

// NodeRevision is one node's Revision.
type NodeRevision struct {
	Name     string
	Revision uint64
}

// Revisions lists every node's Revision, by name: for the shell's tick,
// which looks at every node, without building the nodes' views.
func (s *State) Revisions() []NodeRevision {
	out := make([]NodeRevision, 0, len(s.members))
	for _, name := range sortedKeys(s.members) {
		out = append(out, NodeRevision{name, max(s.members[name].rev, s.revAll)})
	}
	return out
}

// noteChanges records what an event of kind k changed beyond the nodes the
// reducer touched itself: root's status reads the capacity, which every
// measuring input may move.
func (s *State) noteChanges(k events.Kind) {
	switch k {
	case events.KindConfig, events.KindSynced:
		s.changedAll = true
		s.revAll = s.seq
	case events.KindNode, events.KindResourceFlavor, events.KindDeviceClass, events.KindResourceSlice,
		events.KindTick, events.KindMeasureFailed, events.KindMeasureRecovered:
		s.changedNode(v1beta1.RootName)
	}
}

// setUsage keeps a managed ClusterQueue's usage, recording a change only
// when a figure differs: Kueue rewrites a ClusterQueue's status on every
// admission, most often with the same totals.
func (s *State) setUsage(team string, u []events.Usage, present bool) {
	// No usage reported and an empty usage project alike.
	if !present {
		if len(s.usage[team]) > 0 {
			s.changedNode(team)
		}
		delete(s.usage, team)
		return
	}
	u = slices.SortedFunc(slices.Values(u), compareUsage)
	if !slices.EqualFunc(s.usage[team], u, usageEqual) {
		s.changedNode(team)
	}
	s.usage[team] = u
}

func usageEqual(a, b events.Usage) bool {
	return a.Resource == b.Resource && a.Flavor == b.Flavor && a.Admitted.Cmp(b.Admitted) == 0 &&
		a.Reserved.Cmp(b.Reserved) == 0 && a.Borrowed.Cmp(b.Borrowed) == 0
}
