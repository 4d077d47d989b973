package state

import (
	"maps"
	"slices"
	"time"

	"github.com/looplab/fsm"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// State is everything the quota manager knows, built only from events. It
// is not safe for concurrent use: exactly one goroutine applies events;
// others read a Clone.
type State struct {
	cfg     events.Config
	lastSeq uint64
	seq     uint64    // of the event being applied
	now     time.Time // of the event being applied, in whole seconds

	// The tree.
	members  map[string]*member
	kids     map[string][]string          // parent name -> existing children naming it, sorted
	sums     map[string]map[Pair]Total    // parent name -> pair -> children's nominal total
	byPair   map[Pair]map[string]struct{} // pair -> nodes with a budget on it
	byFlavor map[string]map[string]struct{}

	// The cluster.
	flavors      map[string]map[string]string // ResourceFlavor -> nodeLabels
	hosts        map[string]*host             // Kubernetes Nodes
	tallies      map[Pair]*tally              // measured resource x known flavor
	unattributed map[string]Amount            // resource -> installed on nodes matching no flavor
	strays       map[string]struct{}          // nodes with unattributed capacity
	dra          draState                     // DRA DeviceClasses, ResourceSlices and their contributions
	fleet        *fleet                       // a management plane's member clusters; nil in workload mode

	// Root's capacity status.
	synced   bool
	entries  map[Pair]*entry
	rootSeen bool
	reported []v1beta1.CapacityStatus // root's status.capacity as last seen, normalized
	failedAt time.Time
	failure  string
	// failing are the sources (informers) whose list or watch fails, with
	// why: while any does, no observedAt stamp is refreshed.
	failing     map[string]string
	usage       map[string][]events.Usage // managed ClusterQueue -> usage
	transitions []Transition              // of the event being applied

	pass  pass
	facts Facts // scratch for evaluate, so that it allocates nothing
	// machine moves every node between phases (see newMachine).
	machine *fsm.FSM
	// cause is the cause of the event being applied: it decides the moves
	// the machine allows.
	cause Cause

	// progress is the resourceVersion up to which the state holds every
	// AcceleratorQuota event (see Progress); horizon the highest applied
	// (see Horizon). They differ only while listing: between a
	// QuotaListing and the QuotaListed that ends it, objects come in the
	// order of their names and progress holds still.
	progress, horizon uint64
	listing           bool
	// written is the tree as a base and the writes since (TreeSnapshot).
	written treeLog

	// leader is the replica that leads, as its Leadership events say
	// (outcome.go); mark and markTerm name its lead on what a management
	// plane writes (holds.go), "" while it does not lead.
	leader   string
	mark     string
	markTerm uint64

	// What the events since the last TakeChanges changed (see Changes).
	changed    map[string]struct{}
	changedAll bool
	// revAll is the sequence number of the last event that may have
	// changed every node's projection (see Revision).
	revAll uint64
}

// member is one node of the tree.
type member struct {
	name     string
	gen      int64
	uid      string // metadata.uid
	version  uint64 // resourceVersion, as last seen
	deleting bool   // metadata.deletionTimestamp is set: it waits for finalizers
	spec     *v1beta1.AcceleratorQuotaSpec
	shape    shape
	place    Place
	viols    []Violation
	frozenBy string // nearest ancestor that breaks a rule, for a node that reaches root
	frozenAs Reason // that ancestor's primary reason
	phase    Phase
	message  string
	// outcome is the leader's applier's last report on the node.
	outcome events.Outcome
	// since and stored date the node's conditions (stamps.go).
	since  Since
	stored []events.Stamp
	// rev is the sequence number of the last event that may have changed
	// the node's projection (see Revision).
	rev uint64
	// splits are a team's budgets split among a management plane's
	// members, from its last evaluation (Splits).
	splits []BudgetSplit
	// hold is, on a management plane, a team's hold record and what its
	// copies may be written with (holds.go); never modified in place.
	hold *nodeHold
}

// shape is what the rules read of a spec; a spec change that leaves it
// alone (a limit's amount, a priorityTier's value) re-evaluates nothing.
type shape struct {
	role         v1beta1.Role
	parent       string // parentOf
	hasParentRef bool
	priorityTier bool
	budgets      []Budget
	// gone is spec.goneClusters: root's admission-only rule reads it
	// (gone.go), and on any other node it breaks NodeKindInvalid.
	gone []v1beta1.GoneCluster
}

func shapeOf(name string, spec *v1beta1.AcceleratorQuotaSpec) shape {
	return shape{
		role:         spec.Role,
		parent:       parentOf(name, spec),
		hasParentRef: spec.ParentRef != nil,
		priorityTier: spec.PriorityTier != nil,
		budgets:      BudgetsOf(spec),
		gone:         spec.GoneClusters,
	}
}

func (s shape) equal(o shape) bool {
	return s.role == o.role && s.parent == o.parent && s.hasParentRef == o.hasParentRef &&
		s.priorityTier == o.priorityTier && slices.EqualFunc(s.budgets, o.budgets, Budget.equal) && slices.Equal(s.gone, o.gone)
}

// New returns the state before any event: no tree, no cluster, the default
// configuration, and no measurement taken yet.
func New() *State {
	s := &State{
		cfg:          events.DefaultConfig(),
		members:      map[string]*member{},
		kids:         map[string][]string{},
		sums:         map[string]map[Pair]Total{},
		byPair:       map[Pair]map[string]struct{}{},
		byFlavor:     map[string]map[string]struct{}{},
		flavors:      map[string]map[string]string{},
		hosts:        map[string]*host{},
		tallies:      map[Pair]*tally{},
		unattributed: map[string]Amount{},
		strays:       map[string]struct{}{},
		dra:          newDRAState(),
		entries:      map[Pair]*entry{},
		usage:        map[string][]events.Usage{},
		pass:         newPass(),
	}
	s.machine = s.newMachine()
	return s
}

// Apply applies one event and returns the phase transitions it caused, in
// node-name order (a deletion first). It mutates s; Clone first to keep the
// state before. It reads no clock: the event's Time stamps whatever it
// changes. An event that Event.Validate refuses changes nothing but
// LastSeq. Apply never fails: every input, however odd, is a state.
//
// The state keeps parts of the event's payload (a spec, a Node's labels)
// without copying them: do not modify an event once it is applied, as
// nothing modifies an event once it is published.
func (s *State) Apply(ev events.Event) []Transition {
	s.lastSeq, s.seq = ev.Seq, ev.Seq
	if ev.Validate() != nil || ev.Kind == events.KindVerdict || ev.Kind == events.KindDrift {
		// A verdict is recorded for the audit trail only: the write it
		// admitted reaches the state as an AcceleratorQuota event. A
		// drift changes nothing the state holds: it tells the shell, and
		// a replay, why the node's objects are compared again.
		return nil
	}
	s.now = ev.Time.UTC().Truncate(time.Second)
	s.cause = causeOf(ev.Kind)
	s.transitions = nil
	switch ev.Kind {
	case events.KindAcceleratorQuota:
		s.horizon = max(s.horizon, ev.Version)
		if !s.listing {
			s.progress = max(s.progress, ev.Version)
		}
		if ev.Op == events.OpDelete {
			s.deleteQuota(ev.Key)
		} else {
			s.upsertQuota(ev.Quota, ev.Version)
		}
	case events.KindNode:
		if ev.Op == events.OpDelete {
			s.deleteNode(ev.Key)
		} else {
			s.upsertNode(ev.Node)
		}
	case events.KindResourceFlavor:
		if ev.Op == events.OpDelete {
			s.setFlavor(ev.Key, nil, false)
		} else {
			s.setFlavor(ev.Key, ev.Flavor.NodeLabels, true)
		}
	case events.KindClusterQueue:
		if ev.Op == events.OpDelete || !ev.Queue.Managed {
			s.setUsage(ev.Key, nil, false)
		} else {
			s.setUsage(ev.Key, ev.Queue.Usage, true)
		}
	case events.KindDeviceClass:
		if ev.Op == events.OpDelete {
			s.setClass(ev.Key, nil)
		} else {
			s.setClass(ev.Key, ev.DeviceClass)
		}
	case events.KindResourceSlice:
		if ev.Op == events.OpDelete {
			s.setSlice(ev.Key, nil)
		} else {
			s.setSlice(ev.Key, ev.ResourceSlice)
		}
	case events.KindConfig:
		s.setConfig(*ev.Config)
	case events.KindMember:
		s.setMember(ev.Key, ev.Member)
	case events.KindMembership:
		s.setMembership(ev.Key, ev.Membership)
	case events.KindQuotaListing:
		s.listing = true
	case events.KindQuotaListed:
		// The list's objects, and the deletions it implies, are all in:
		// the state holds the AcceleratorQuotas as they were at its
		// version, and the watch goes on from there.
		s.listing = false
		s.progress = ev.Version
		s.horizon = max(s.horizon, ev.Version)
	case events.KindSynced:
		s.synced = true
		s.measure()
	case events.KindTick:
		if s.synced {
			s.measure()
		}
		s.regrace()
	case events.KindMeasureFailed:
		s.failedAt, s.failure = s.now, ev.Failure.Reason
		if src := ev.Failure.Source; src != "" {
			if s.failing == nil {
				s.failing = map[string]string{}
			}
			s.failing[src] = ev.Failure.Reason
		}
	case events.KindMeasureRecovered:
		delete(s.failing, ev.Failure.Source)
	case events.KindOutcome:
		s.setOutcome(ev.Key, *ev.Outcome)
	case events.KindLeadership:
		s.setLeadership(*ev.Leadership)
	case events.KindStart:
		s.started()
	}
	s.settle()
	s.noteChanges(ev.Kind)
	out := s.transitions
	s.transitions = nil
	return out
}

func compareUsage(a, b events.Usage) int {
	return Pair{a.Resource, a.Flavor}.Compare(Pair{b.Resource, b.Flavor})
}

// setConfig puts a new configuration in force: the whole tree is evaluated
// again, and capacity measured again (O(nodes) when the measured resources
// change).
func (s *State) setConfig(c events.Config) {
	old := s.cfg
	s.cfg = c.Normalized()
	if !old.Equal(s.cfg) && (len(old.DeviceClassMappings) > 0 || len(s.cfg.DeviceClassMappings) > 0) {
		s.draRebuild()
	} else if !slices.Equal(old.MeasuredResources, s.cfg.MeasuredResources) {
		s.setMappings()
		s.recount()
	}
	s.setMembers()
	for name := range s.members {
		s.pass.eval[name] = struct{}{}
	}
	if s.synced {
		s.measure()
	}
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	return slices.Sorted(maps.Keys(m))
}

// LastSeq is the sequence number of the last event applied.
func (s *State) LastSeq() uint64 { return s.lastSeq }

// Config is the configuration in force.
func (s *State) Config() events.Config { return s.cfg.Normalized() }

// MaxTreeDepth implements Env.
func (s *State) MaxTreeDepth() int { return s.cfg.MaxTreeDepth }

// FlavorExists implements Env.
func (s *State) FlavorExists(flavor string) bool {
	if s.fleet != nil {
		return s.fleet.flavors[flavor] > 0
	}
	_, ok := s.flavors[flavor]
	return ok
}

// ChildTotal implements Env.
func (s *State) ChildTotal(parent string, p Pair) Total { return s.sums[parent][p] }

// HighWaterMark implements Env: the mark of p on root, 0 when p has none
// (on a management plane, the sum of the members' marks).
func (s *State) HighWaterMark(p Pair) Amount {
	if s.fleet != nil {
		return s.fleet.marks[p]
	}
	if e := s.entries[p]; e != nil {
		return e.mark
	}
	return 0
}

// Status is a node's state as its conditions report it.
type Status struct {
	Phase Phase
	// Reason is Admitted when Ready, else the phase's reason.
	Reason Reason
	// Message is the Ready condition's message; the Degraded condition's
	// is the same, except "no invariant violated" when Ready.
	Message string
}

// Ready reports whether the node is Ready.
func (st Status) Ready() bool { return st.Phase == PhaseReady }

// DegradedMessage is the Degraded condition's message.
func (st Status) DegradedMessage() string {
	if st.Ready() {
		return MessageNoViolation
	}
	return st.Message
}

// NodeView is a node of the tree as downstream reads it.
type NodeView struct {
	Name       string
	Generation int64
	// Spec is the state's own copy: do not modify it.
	Spec *v1beta1.AcceleratorQuotaSpec
	// Parent is the parent the node's place follows ("" for root and for a
	// node without parentRef), whether or not it exists.
	Parent   string
	Children []string
	// Depth is the number of edges below root, or -1 when the node does not
	// reach root.
	Depth int
	Status
	// Violations are the rules the node breaks itself, in Precedence order.
	Violations []Violation
	// FrozenBy is the nearest ancestor that breaks a rule, if any.
	FrozenBy string
	// UID is the object's metadata.uid.
	UID string
	// Deleting is the object's deletionTimestamp being set.
	Deleting bool
	// Version is the object's resourceVersion as the state last read it.
	Version uint64
}

func (s *State) view(m *member) NodeView {
	return NodeView{
		Name: m.name, UID: m.uid, Generation: m.gen, Spec: m.spec, Parent: m.shape.parent,
		Children: slices.Clone(s.kids[m.name]), Depth: m.place.Depth,
		Status:     m.status(),
		Violations: slices.Clone(m.viols), FrozenBy: m.frozenBy, Deleting: m.deleting, Version: m.version,
	}
}

func (m *member) status() Status {
	switch m.phase {
	case PhaseReady:
		return Status{PhaseReady, ReasonAdmitted, m.message}
	case PhaseFrozen:
		return Status{PhaseFrozen, ReasonFrozen, m.message}
	}
	return Status{m.phase, Reason(m.phase), m.message}
}

// Nodes lists the tree's nodes by name.
func (s *State) Nodes() []NodeView {
	out := make([]NodeView, 0, len(s.members))
	for _, name := range sortedKeys(s.members) {
		out = append(out, s.view(s.members[name]))
	}
	return out
}

// Node is one node of the tree.
func (s *State) Node(name string) (NodeView, bool) {
	m := s.members[name]
	if m == nil {
		return NodeView{}, false
	}
	return s.view(m), true
}

// NodeStatus is one node's status.
func (s *State) NodeStatus(name string) (Status, bool) {
	m := s.members[name]
	if m == nil {
		return Status{}, false
	}
	return m.status(), true
}

// Violations lists every rule broken in the tree, by node and then
// Precedence: Evaluate of the current tree, kept incrementally.
func (s *State) Violations() []Violation {
	var out []Violation
	for _, name := range sortedKeys(s.members) {
		out = append(out, s.members[name].viols...)
	}
	return out
}

// Tree is the current tree, for Evaluate. The specs are the state's own:
// do not modify them.
func (s *State) Tree() Tree {
	t := make(Tree, len(s.members))
	for name, m := range s.members {
		t[name] = m.spec
	}
	return t
}

// treeLog is the tree as a base, never modified once made, and the specs
// written since, in order, only ever appended to. A snapshot is a copy of
// the two slice headers: O(1) under the reducer's lock, and the reducer's
// later writes touch nothing it holds. The base is made anew once the
// writes since outnumber the nodes, so that a write costs O(1) amortized
// and a snapshot's replay O(tree).
type treeLog struct {
	base    Tree
	changes []treeChange
}

type treeChange struct {
	name string
	spec *v1beta1.AcceleratorQuotaSpec // nil: deleted
}

func (l *treeLog) note(name string, spec *v1beta1.AcceleratorQuotaSpec, nodes int) {
	l.changes = append(l.changes, treeChange{name, spec})
	if len(l.changes) > max(64, nodes) {
		l.base, l.changes = l.snapshot().Tree(), nil
	}
}

func (l *treeLog) snapshot() TreeSnapshot {
	return TreeSnapshot{base: l.base, changes: slices.Clip(l.changes)}
}

// clone shares the base and the writes so far; an append by either copy
// then goes to a slice of its own.
func (l treeLog) clone() treeLog {
	return treeLog{base: l.base, changes: slices.Clip(l.changes)}
}

// TreeSnapshot is the state's tree at one point, taken in O(1) (State.
// TreeSnapshot): the webhook takes it under the reducer's lock and
// builds the tree (Tree) outside it.
type TreeSnapshot struct {
	base    Tree
	changes []treeChange
}

// TreeSnapshot is the tree as it is now (Tree), in O(1): nothing the
// reducer applies later changes it.
func (s *State) TreeSnapshot() TreeSnapshot { return s.written.snapshot() }

// Tree builds the snapshot's tree, in O(tree). The specs are the state's:
// do not modify them.
func (t TreeSnapshot) Tree() Tree {
	out := make(Tree, len(t.base)+len(t.changes))
	maps.Copy(out, t.base)
	for _, c := range t.changes {
		if c.spec == nil {
			delete(out, c.name)
		} else {
			out[c.name] = c.spec
		}
	}
	return out
}

// Marks are root's high-water marks, for Evaluate (on a management
// plane, the sums of the members' marks).
func (s *State) Marks() map[Pair]Amount {
	if s.fleet != nil {
		return maps.Clone(s.fleet.marks)
	}
	out := make(map[Pair]Amount, len(s.entries))
	for p, e := range s.entries {
		out[p] = e.mark
	}
	return out
}

// FlavorNames is the set of ResourceFlavors that exist, for Evaluate (on
// a management plane, those some member has).
func (s *State) FlavorNames() map[string]bool {
	if s.fleet != nil {
		out := make(map[string]bool, len(s.fleet.flavors))
		for f := range s.fleet.flavors {
			out[f] = true
		}
		return out
	}
	out := make(map[string]bool, len(s.flavors))
	for f := range s.flavors {
		out[f] = true
	}
	return out
}

// WhatIf evaluates the tree as it is and as it would be after writing spec
// to node name (nil spec: deleting it), with the current marks, flavors and
// configuration. The webhook denies a write when Diff(before, after) holds
// a violation it denies for. It costs O(tree).
func (s *State) WhatIf(name string, spec *v1beta1.AcceleratorQuotaSpec) (before, after []Violation) {
	tree := s.Tree()
	marks, flavors := s.Marks(), s.FlavorNames()
	before = s.Violations()
	if spec == nil {
		delete(tree, name)
	} else {
		tree[name] = spec
	}
	return before, Evaluate(tree, marks, flavors, s.cfg)
}

// Usage is a team's use of its budgets, from its ClusterQueue's status,
// sorted by pair; nil when no ClusterQueue of ours has reported.
func (s *State) Usage(team string) []events.Usage { return slices.Clone(s.usage[team]) }

// Clone returns a deep copy of s, with state machines of its own in the same
// phases. It costs O(state).
func (s *State) Clone() *State {
	c := *s
	c.cfg = s.cfg.Normalized()
	c.members = make(map[string]*member, len(s.members))
	for name, m := range s.members {
		cm := *m
		cm.shape.budgets = slices.Clone(m.shape.budgets)
		cm.viols = slices.Clone(m.viols)
		cm.place.Cycle = slices.Clone(m.place.Cycle)
		c.members[name] = &cm
	}
	c.kids = make(map[string][]string, len(s.kids))
	for k, v := range s.kids {
		c.kids[k] = slices.Clone(v)
	}
	c.sums = make(map[string]map[Pair]Total, len(s.sums))
	for k, v := range s.sums {
		c.sums[k] = maps.Clone(v)
	}
	c.byPair = make(map[Pair]map[string]struct{}, len(s.byPair))
	for k, v := range s.byPair {
		c.byPair[k] = maps.Clone(v)
	}
	c.byFlavor = make(map[string]map[string]struct{}, len(s.byFlavor))
	for k, v := range s.byFlavor {
		c.byFlavor[k] = maps.Clone(v)
	}
	c.flavors = maps.Clone(s.flavors) // label maps are never modified in place
	c.hosts = make(map[string]*host, len(s.hosts))
	for k, v := range s.hosts {
		cm := *v
		cm.flavors = slices.Clone(v.flavors)
		c.hosts[k] = &cm // records are never modified
	}
	c.tallies = make(map[Pair]*tally, len(s.tallies))
	for k, v := range s.tallies {
		ct := *v
		c.tallies[k] = &ct
	}
	c.unattributed = maps.Clone(s.unattributed)
	c.strays = maps.Clone(s.strays)
	c.dra = s.dra.clone()
	c.fleet = s.fleet.clone()
	c.entries = make(map[Pair]*entry, len(s.entries))
	for k, v := range s.entries {
		ce := *v
		c.entries[k] = &ce
	}
	c.written = s.written.clone()
	c.reported = slices.Clone(s.reported)
	c.failing = maps.Clone(s.failing)
	c.usage = maps.Clone(s.usage) // usage slices are never modified in place
	c.transitions = nil
	c.changed, c.changedAll = nil, false
	c.pass = newPass()
	c.facts = Facts{}
	c.machine = c.newMachine()
	return &c
}

// newMachine returns the state machine of s's nodes, recording their
// transitions into s.
func (s *State) newMachine() *fsm.FSM {
	return newMachine(func(node string, from, to Phase, reason Reason, message string) {
		s.transitions = append(s.transitions, Transition{Seq: s.seq, Node: node, From: from, To: to, Reason: reason, Message: message})
	})
}
