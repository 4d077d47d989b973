package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// A management plane (Config.Mode management) holds the fleet's tree: its
// budgets are fleet totals, split among the member clusters its Config
// lists. What the plane reads of a member comes as Member events: its
// ResourceFlavors and its root's high-water marks when it answers, why not
// when it does not. The rules read the fleet as one cluster: a flavor
// exists when some member has it, and a pair's high-water mark is the sum
// of the members' marks. A member that stops answering keeps the flavors
// and marks it last reported, so its shares stay where they were.

// fleet is a management plane's view of its member clusters.
type fleet struct {
	clusters map[string]*cluster
	names    []string        // the members, sorted
	marks    map[Pair]Amount // pair -> the sum of the members' marks
	flavors  map[string]int  // flavor -> how many members have it
	reported map[string]bool // members that have reported at least once
	// listed are the members the plane's inventory lists (Membership
	// events), with what it says of them; the members are these and the
	// configuration's (Config.Members, which older logs carry).
	listed map[string]events.Membership
	// leaving are the clusters that left the fleet while they still
	// held copies, as they last reported: the plane deletes those copies
	// while it reaches them, and the cluster is forgotten once it reports
	// none.
	leaving map[string]*cluster
	// observedAt stamps root's capacity on the plane: when a member last
	// reported figures, or a tick found every member answering a report
	// interval after the last stamp (restamp).
	observedAt time.Time
	// gone are the clusters root's spec declares gone for good and that
	// the plane forgot (goneClusters; see setGone).
	gone     map[string]bool
	goneSpec []v1beta1.GoneCluster
	// released are the clusters that left the fleet and were read holding
	// none of its copies: what the hold records say of them no longer
	// counts.
	released map[string]bool
	// goneSince is when each forgotten cluster was forgotten.
	goneSince map[string]time.Time
	// out are the members left out of the Proportional splits: never
	// reported within the grace (splitOut).
	out map[string]bool
	// The teams whose holds are computed again at the end of the event
	// (holds.go): dirty ones, all of them, and pending, those with a raise
	// that waits, each time anything changed.
	dirty        map[string]struct{}
	dirtyAll     bool
	retryPending bool
	pending      map[string]struct{}
}

// cluster is one member cluster, as its Member events say.
type cluster struct {
	reachable bool
	// since is when reachable took its value: when the plane started
	// listing the member, or the time of the Member event that flipped it.
	since       time.Time
	message     string // why it does not answer
	flavors     []string
	marks       map[Pair]Amount
	allocatable map[Pair]Amount
	// usage is what its Kueue admitted, reserved and borrowed for the
	// plane's copies, sorted; kept, like the rest, while it does not answer.
	usage []events.MemberUsage
	// copies are the plane's copies it holds, sorted by node.
	copies []events.MemberCopy
	// exposed are, per copy (node), the most this replica let its copier
	// write there since the copy was read at its version (holds.go). Its
	// values are never modified in place.
	exposed map[string]exposure
	// heard is whether it answered since the plane started: its copies
	// are then known, not only bounded by the hold records.
	heard bool
	// reportedAt is when it last reported (a Member event that found it
	// answering), since the plane started.
	reportedAt time.Time
	// left says why it left the fleet, for a leaving cluster: what the
	// inventory said (a DuplicateCluster refusal, a deleted profile).
	left string
}

func newFleet() *fleet {
	return &fleet{clusters: map[string]*cluster{}, marks: map[Pair]Amount{}, flavors: map[string]int{}, reported: map[string]bool{},
		listed: map[string]events.Membership{}, leaving: map[string]*cluster{}, gone: map[string]bool{}, released: map[string]bool{},
		dirty: map[string]struct{}{}, pending: map[string]struct{}{}}
}

func (f *fleet) clone() *fleet {
	if f == nil {
		return nil
	}
	c := &fleet{clusters: make(map[string]*cluster, len(f.clusters)), names: f.names,
		marks: maps.Clone(f.marks), flavors: maps.Clone(f.flavors), reported: maps.Clone(f.reported), observedAt: f.observedAt,
		listed: maps.Clone(f.listed), leaving: make(map[string]*cluster, len(f.leaving)), gone: maps.Clone(f.gone), goneSpec: f.goneSpec, out: maps.Clone(f.out), released: maps.Clone(f.released),
		dirty: maps.Clone(f.dirty), dirtyAll: f.dirtyAll, retryPending: f.retryPending, pending: maps.Clone(f.pending)}
	c.goneSince = maps.Clone(f.goneSince)
	for name, cl := range f.clusters {
		cc := *cl // flavors and the maps are replaced, never modified
		cc.exposed = maps.Clone(cl.exposed)
		c.clusters[name] = &cc
	}
	for name, cl := range f.leaving {
		cc := *cl
		cc.exposed = maps.Clone(cl.exposed)
		c.leaving[name] = &cc
	}
	return c
}

// setMembers puts the member list in force, the configuration's and the
// inventory's: a member no longer listed takes its flavors and marks with
// it (and is kept as leaving while it holds copies), a new one starts
// unreported.
func (s *State) setMembers() {
	if s.cfg.Mode != events.ModeManagement {
		s.fleet = nil
		return
	}
	if s.fleet == nil {
		s.fleet = newFleet()
	}
	f := s.fleet
	names := slices.Clone(s.cfg.Members)
	for name := range f.listed {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return f.gone[n] })
	slices.Sort(names)
	for name, cl := range f.clusters {
		if !slices.Contains(names, name) {
			s.report(name, cl, nil, nil)
			delete(f.clusters, name)
			delete(f.reported, name)
			switch {
			case f.gone[name]:
			case len(cl.copies) > 0 || (!cl.heard && s.recorded(name)):
				// It may hold copies: the plane deletes them while it
				// reaches it, and they count until they are read gone.
				f.leaving[name] = cl
			case cl.heard:
				f.released[name] = true // known to hold none
			}
			s.changedEverything() // every node's status lists the members
		}
	}
	for name := range f.leaving {
		if f.gone[name] {
			delete(f.leaving, name)
			s.changedEverything()
		}
	}
	joined := false
	for _, name := range names {
		if f.clusters[name] == nil {
			// A cluster that comes back while leaving starts anew: what it
			// holds is in its next report.
			delete(f.leaving, name)
			delete(f.released, name)
			f.clusters[name] = &cluster{message: "not heard from yet", since: s.now}
			s.changedEverything()
			joined = true
		}
	}
	if !slices.Equal(f.names, names) {
		for n := range s.members { // every split reads the member list
			s.queue(n)
		}
		s.holdsEverywhere()
	}
	f.names = names
	if joined {
		// A plane that restarts learns its members after root: what
		// root's status kept of them holds until they report.
		s.seedMembers(s.reported)
	}
}

// setMembership applies a Membership event: the cluster joins or leaves
// the fleet. Outside a management plane it changes nothing.
func (s *State) setMembership(name string, m *events.Membership) {
	if s.fleet == nil {
		return
	}
	f := s.fleet
	cur, had := f.listed[name]
	if !m.Member {
		if !had {
			return
		}
		delete(f.listed, name)
		if cl := f.clusters[name]; cl != nil {
			cl.left = m.Message // kept while it leaves
		}
		s.setMembers()
		return
	}
	f.listed[name] = *m
	if had && cur != *m {
		s.changedEverything() // the statuses show what the inventory says
	}
	if !had {
		s.setMembers()
	}
}

// setMember applies a Member event. An event for a cluster that is
// neither a member nor leaving changes nothing.
func (s *State) setMember(name string, m *events.Member) {
	if s.fleet == nil {
		return
	}
	if cl := s.fleet.leaving[name]; cl != nil {
		s.setLeaving(name, cl, m)
		return
	}
	cl := s.fleet.clusters[name]
	if cl == nil {
		return
	}
	if !m.Reachable {
		if cl.reachable || cl.message != m.Message {
			if cl.reachable {
				cl.since = s.now
				s.holdsEverywhere()
			}
			cl.reachable, cl.message = false, m.Message
			s.changedEverything()
			s.regone()
		}
		return
	}
	if !cl.reachable {
		cl.since = s.now
		s.changedEverything()
		s.holdsEverywhere()
	}
	cl.reachable, cl.message, cl.heard, cl.reportedAt = true, "", true, s.now
	s.take(name, cl, m.Flavors, m.Capacity)
	retake(s, &cl.usage, m.Usage, sameUsage, func(u events.MemberUsage) string { return u.Node })
	s.retakeCopies(cl, m.Copies)
}

// retakeCopies replaces what a cluster holds of the plane's copies: the
// nodes whose copies moved are shown again and their holds computed
// again.
func (s *State) retakeCopies(cl *cluster, next []events.MemberCopy) {
	if slices.EqualFunc(cl.copies, next, events.MemberCopy.Equal) {
		return
	}
	moved := func(c events.MemberCopy) {
		s.changedNode(c.Node)
		s.holdsDirty(c.Node)
	}
	i, j := 0, 0
	for i < len(cl.copies) || j < len(next) {
		switch {
		case j == len(next) || (i < len(cl.copies) && cl.copies[i].Node < next[j].Node):
			moved(cl.copies[i])
			i++
		case i == len(cl.copies) || next[j].Node < cl.copies[i].Node:
			moved(next[j])
			j++
		default:
			if !cl.copies[i].Equal(next[j]) {
				moved(next[j])
			}
			i++
			j++
		}
	}
	cl.copies = next
	s.holdsPendingAll()
}

// setLeaving applies a Member event of a cluster that left the fleet:
// only its reachability and the copies it still holds matter. Once it
// answers holding none, it is forgotten.
func (s *State) setLeaving(name string, cl *cluster, m *events.Member) {
	if !m.Reachable {
		if cl.reachable || cl.message != m.Message {
			if cl.reachable {
				cl.since = s.now
			}
			cl.reachable, cl.message = false, m.Message
			s.changedEverything()
			s.regone()
		}
		return
	}
	if !cl.reachable {
		cl.since = s.now
		s.changedEverything()
	}
	cl.reachable, cl.message, cl.heard, cl.reportedAt = true, "", true, s.now
	s.retakeCopies(cl, m.Copies)
	if len(cl.copies) == 0 {
		delete(s.fleet.leaving, name)
		s.fleet.released[name] = true
		s.changedEverything()
		s.holdsEverywhere()
	}
}

// retake replaces a member's list with next and, when they differ, marks
// the nodes of both changed: their statuses show what the member holds
// (its usage, which root's status.members does not show).
func retake[T any](s *State, cur *[]T, next []T, same func(a, b T) bool, node func(T) string) {
	if slices.EqualFunc(*cur, next, same) {
		return
	}
	for _, x := range *cur {
		s.changedOwn(node(x))
	}
	for _, x := range next {
		s.changedOwn(node(x))
	}
	*cur = next
}

// CopyOn is how member cluster holds node's copy, as it last reported;
// false when it holds none.
func (s *State) CopyOn(cluster, node string) (events.MemberCopy, bool) {
	if s.fleet == nil || s.fleet.clusters[cluster] == nil {
		return events.MemberCopy{}, false
	}
	cps := s.fleet.clusters[cluster].copies
	if i, ok := slices.BinarySearchFunc(cps, node, func(c events.MemberCopy, n string) int { return cmp.Compare(c.Node, n) }); ok {
		return cps[i], true
	}
	return events.MemberCopy{}, false
}

// MemberCopies is how each member holds node's copy, by cluster name: the
// members that hold one, as they last reported; nil outside a plane.
func (s *State) MemberCopies(node string) map[string]events.MemberCopy {
	if s.fleet == nil {
		return nil
	}
	out := map[string]events.MemberCopy{}
	for _, name := range s.fleet.names {
		if c, ok := s.CopyOn(name, node); ok {
			out[name] = c
		}
	}
	return out
}

func sameUsage(a, b events.MemberUsage) bool {
	return a.Node == b.Node && a.Resource == b.Resource && a.Flavor == b.Flavor &&
		a.Admitted.Cmp(b.Admitted) == 0 && a.Reserved.Cmp(b.Reserved) == 0 && a.Borrowed.Cmp(b.Borrowed) == 0
}

// ClusterUsage is what one member's Kueue admitted, reserved and borrowed
// for a team's copy there, per pair.
type ClusterUsage struct {
	Cluster string
	Pair
	Admitted, Reserved, Borrowed Amount
}

// MemberUsage is what each member last reported of a team's copy there,
// by cluster name, then pair; nil outside a management plane.
func (s *State) MemberUsage(node string) []ClusterUsage {
	if s.fleet == nil {
		return nil
	}
	var out []ClusterUsage
	for _, name := range s.fleet.names {
		// Sorted by node (events.SortUsage): node's entries are one run.
		us := s.fleet.clusters[name].usage
		i, _ := slices.BinarySearchFunc(us, node, func(u events.MemberUsage, n string) int { return cmp.Compare(u.Node, n) })
		for ; i < len(us) && us[i].Node == node; i++ {
			u := us[i]
			out = append(out, ClusterUsage{Cluster: name, Pair: Pair{u.Resource, u.Flavor},
				Admitted: AmountOf(u.Admitted), Reserved: AmountOf(u.Reserved), Borrowed: AmountOf(u.Borrowed)})
		}
	}
	return out
}

// TeamUsage is a team's use of its budgets, sorted by pair: its
// ClusterQueue's (Usage) in workload mode; on a management plane, what
// its members last reported of their copies (MemberUsage), summed per
// pair. The team's status and the budget gauges both read it.
func (s *State) TeamUsage(team string) []events.Usage {
	if s.fleet == nil {
		return s.Usage(team)
	}
	type sum struct{ admitted, reserved, borrowed Amount }
	sums := map[Pair]*sum{}
	for _, u := range s.MemberUsage(team) {
		t := sums[u.Pair]
		if t == nil {
			t = &sum{}
			sums[u.Pair] = t
		}
		t.admitted, t.reserved, t.borrowed = t.admitted+u.Admitted, t.reserved+u.Reserved, t.borrowed+u.Borrowed
	}
	if len(sums) == 0 {
		return nil
	}
	out := make([]events.Usage, 0, len(sums))
	for _, p := range slices.SortedFunc(maps.Keys(sums), Pair.Compare) {
		t := sums[p]
		out = append(out, events.Usage{Resource: p.Resource, Flavor: p.Flavor,
			Admitted: t.admitted.Quantity(), Reserved: t.reserved.Quantity(), Borrowed: t.borrowed.Quantity()})
	}
	return out
}

// take puts in force what a member reported, or what root's status kept
// of it: its flavors and its capacity.
func (s *State) take(name string, cl *cluster, flavors []string, capacity []events.MemberCapacity) {
	marks := make(map[Pair]Amount, len(capacity))
	alloc := make(map[Pair]Amount, len(capacity))
	for _, c := range capacity {
		p := Pair{c.Resource, c.Flavor}
		marks[p], alloc[p] = AmountOf(c.HighWaterMark), AmountOf(c.Allocatable)
	}
	if !s.fleet.reported[name] {
		s.fleet.reported[name] = true
		for n := range s.members { // a split that waited for it may go on
			s.queue(n)
		}
	}
	if !maps.Equal(cl.allocatable, alloc) {
		s.changedEverything() // root's per-cluster capacity shows it
	}
	s.fleet.observedAt = s.now
	s.report(name, cl, flavors, marks)
	cl.allocatable = alloc
}

// seedMembers reads back what root's stored status kept of each member
// (capacity[].perCluster) for the members that have not reported since
// the plane started: a plane that restarts keeps the shares it had, as
// for a member that does not answer, until each member reports again.
func (s *State) seedMembers(stored []v1beta1.CapacityStatus) {
	if s.fleet == nil {
		return
	}
	kept := map[string][]events.MemberCapacity{}
	for _, c := range stored {
		for _, pc := range c.PerCluster {
			if s.fleet.clusters[pc.Cluster] != nil && !s.fleet.reported[pc.Cluster] {
				kept[pc.Cluster] = append(kept[pc.Cluster], events.MemberCapacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor,
					Allocatable: pc.Allocatable, HighWaterMark: pc.HighWaterMark})
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(kept)) {
		var flavors []string
		for _, c := range kept[name] {
			flavors = append(flavors, c.Flavor)
		}
		cl := s.fleet.clusters[name]
		cl.message = "not heard from since the plane started: its capacity is what root's status kept"
		s.take(name, cl, slices.Compact(slices.Sorted(slices.Values(flavors))), kept[name])
	}
}

// report replaces a member's flavors and marks, keeping the fleet's sums
// and queueing the nodes whose rules read what moved.
func (s *State) report(name string, cl *cluster, flavors []string, marks map[Pair]Amount) {
	f := s.fleet
	for p, old := range cl.marks {
		if marks[p] != old {
			f.marks[p] += marks[p] - old
			if f.marks[p] == 0 {
				delete(f.marks, p)
			}
			s.markMoved(p)
		}
	}
	for p, mark := range marks {
		if _, had := cl.marks[p]; !had && mark != 0 {
			f.marks[p] += mark
			s.markMoved(p)
		}
	}
	for _, fl := range cl.flavors {
		if !slices.Contains(flavors, fl) {
			if f.flavors[fl]--; f.flavors[fl] == 0 {
				delete(f.flavors, fl)
				s.flavorMoved(fl)
			}
		}
	}
	for _, fl := range flavors {
		if !slices.Contains(cl.flavors, fl) {
			if f.flavors[fl]++; f.flavors[fl] == 1 {
				s.flavorMoved(fl)
			}
		}
	}
	cl.flavors, cl.marks = flavors, marks
}

func (s *State) flavorMoved(flavor string) {
	for n := range s.byFlavor[flavor] {
		s.queue(n)
	}
}

// changedEverything marks every node's projection as changed: what a
// member reports shows on every fleet node's status.
func (s *State) changedEverything() {
	s.changedAll = true
	s.revAll = s.seq
}

// fleetCapacity is root's status.capacity on a management plane: per
// pair that some member reports, the members' allocatable and marks
// summed, and each member's part (perCluster, by cluster name), which a
// restarted plane reads back (seedMembers). A member that stopped
// answering keeps its last figures here as in the splits.
func (s *State) fleetCapacity() []v1beta1.CapacityStatus {
	type sum struct {
		alloc, mark Amount
		per         []v1beta1.ClusterCapacity
	}
	byPair := map[Pair]*sum{}
	for _, name := range s.fleet.names {
		cl := s.fleet.clusters[name]
		pairs := slices.Collect(maps.Keys(cl.marks))
		for p := range cl.allocatable {
			if _, ok := cl.marks[p]; !ok {
				pairs = append(pairs, p)
			}
		}
		for _, p := range pairs {
			c := byPair[p]
			if c == nil {
				c = &sum{}
				byPair[p] = c
			}
			alloc, mark := cl.allocatable[p], cl.marks[p]
			c.alloc, c.mark = c.alloc+alloc, c.mark+mark
			c.per = append(c.per, v1beta1.ClusterCapacity{Cluster: name, Allocatable: alloc.Quantity(), HighWaterMark: mark.Quantity()})
		}
	}
	out := make([]v1beta1.CapacityStatus, 0, len(byPair))
	for _, p := range slices.SortedFunc(maps.Keys(byPair), Pair.Compare) {
		c := byPair[p]
		out = append(out, v1beta1.CapacityStatus{ResourceName: p.Resource, ResourceFlavor: p.Flavor,
			Allocatable: c.alloc.Quantity(), HighWaterMark: c.mark.Quantity(), ObservedAt: metav1.NewTime(s.fleet.observedAt), PerCluster: c.per})
	}
	return out
}

// restamp refreshes the plane's capacity stamp when it is a report
// interval old and every member answers: one that does not lets the stamp
// grow old, and the stale-reporting alert shows it, as a failing source
// does in workload mode.
func (f *fleet) restamp(now time.Time, every time.Duration) {
	if every <= 0 || f.observedAt.IsZero() || now.Sub(f.observedAt) < every {
		return
	}
	for _, cl := range f.clusters {
		if !cl.reachable {
			return
		}
	}
	f.observedAt = now
}

// Fleet implements Env.
func (s *State) Fleet() (members []string, waiting string, ok bool) {
	if s.fleet == nil {
		return nil, "", false
	}
	for _, name := range s.fleet.names {
		if !s.fleet.reported[name] && !s.splitOut(name) {
			return s.fleet.names, name, true
		}
	}
	return s.fleet.names, "", true
}

// MemberView is one member cluster as the plane last heard of it.
type MemberView struct {
	Name      string
	Reachable bool
	// Message says why it does not answer.
	Message string
	// Since is when Reachable took its value (the event's time): when it
	// last started or stopped answering, or when the plane started
	// listing it.
	Since time.Time
	// Reported is whether it ever reported its capacity.
	Reported bool
	Flavors  []string
	// Capacity is its root's capacity, by pair (allocatable and
	// high-water mark).
	Capacity []CapacityEntry
	// Inventory is what the plane's inventory says of it: where it is
	// listed and its control plane's health; zero for a member of the
	// configuration (Config.Members).
	Inventory events.Membership
	// Copies are the copies it holds, as it last reported.
	Copies []events.MemberCopy
}

// Reachable reports whether the plane hears from member cluster name.
func (s *State) Reachable(name string) bool {
	if s.fleet == nil || s.fleet.clusters[name] == nil {
		return false
	}
	return s.fleet.clusters[name].reachable
}

// Members lists a management plane's member clusters, by name; nil in
// workload mode.
func (s *State) Members() []MemberView {
	if s.fleet == nil {
		return nil
	}
	out := make([]MemberView, 0, len(s.fleet.names))
	for _, name := range s.fleet.names {
		cl := s.fleet.clusters[name]
		mv := MemberView{Name: name, Reachable: cl.reachable, Message: cl.message, Since: cl.since, Reported: s.fleet.reported[name], Flavors: cl.flavors,
			Inventory: s.fleet.listed[name], Copies: cl.copies}
		for p, mark := range cl.marks {
			mv.Capacity = append(mv.Capacity, CapacityEntry{Pair: p, HighWaterMark: mark, Allocatable: cl.allocatable[p]})
		}
		slices.SortFunc(mv.Capacity, func(a, b CapacityEntry) int { return a.Pair.Compare(b.Pair) })
		out = append(out, mv)
	}
	return out
}

// Leaving lists, by name, the clusters that left a management plane's
// fleet and still hold copies of its nodes, as they last reported: the
// plane deletes those copies while it reaches them. Nil in workload mode.
func (s *State) Leaving() []MemberView {
	if s.fleet == nil || len(s.fleet.leaving) == 0 {
		return nil
	}
	out := make([]MemberView, 0, len(s.fleet.leaving))
	for _, name := range slices.Sorted(maps.Keys(s.fleet.leaving)) {
		cl := s.fleet.leaving[name]
		out = append(out, MemberView{Name: name, Reachable: cl.reachable, Message: cl.message, Copies: cl.copies})
	}
	return out
}

// BudgetSplit is one fleet budget split among the member clusters.
type BudgetSplit struct {
	Pair
	Policy v1beta1.DistributionPolicy
	// Shares are the members' shares, by cluster; a member without one
	// has none.
	Shares []Share
}

func (b BudgetSplit) equal(o BudgetSplit) bool {
	return b.Pair == o.Pair && b.Policy == o.Policy && slices.Equal(b.Shares, o.Shares)
}

// SplitBudgets splits a team's budgets among the fleet's members, in the
// budgets' order, and appends to dst the SplitInvalid violations of those
// it cannot split: an Explicit split that CheckExplicit refuses, a
// Proportional one over marks that are all 0, or one that waits for a
// member that has not reported yet (the node is held until it has). It
// splits nothing outside a management plane, nor on a Cohort: a Cohort's
// budget is only a cap on its children's fleet totals.
func SplitBudgets(dst []Violation, f *Facts, env Env) ([]BudgetSplit, []Violation) {
	members, waiting, ok := env.Fleet()
	if !ok || f.Spec.Role != v1beta1.RoleClusterQueue {
		return nil, dst
	}
	out := make([]BudgetSplit, 0, len(f.Budgets))
	bad := func(b *Budget, format string, args ...any) {
		dst = append(dst, Violation{f.Name, ReasonSplitInvalid, b.Pair.String(), fmt.Sprintf(
			"budget %s on %s: ", b.Resource, b.Flavor) + fmt.Sprintf(format, args...)})
	}
	for i := range f.Budgets {
		b := &f.Budgets[i]
		if b.Oversized != "" {
			continue // BudgetInvalid says what to fix first
		}
		split := BudgetSplit{Pair: b.Pair, Policy: b.Split}
		switch b.Split {
		case v1beta1.DistributionExplicit:
			if err := CheckExplicit(b.Nominal, b.PerCluster, members); err != nil {
				bad(b, "%v", err)
				continue
			}
			split.Shares = b.PerCluster
		case v1beta1.DistributionProportional:
			if waiting != "" {
				bad(b, "member cluster %s has not reported its capacity yet, and a Proportional split needs every member's: the node is held until it does (check that the plane reaches it)", waiting)
				continue
			}
			// A member that never reported within the grace has no mark:
			// it gets no share until it reports.
			weights := make([]Weight, len(members))
			for j, m := range members {
				weights[j] = Weight{Cluster: m, Mark: env.MemberMark(m, b.Pair)}
			}
			shares, err := SplitProportional(b.Nominal, weights)
			if err != nil && b.Nominal > 0 {
				bad(b, "%v", err)
				continue
			}
			split.Shares = shares // a budget of 0 splits into nothing
		default:
			bad(b, "policy %q is neither Explicit nor Proportional: fix the budget's policy or spec.distribution.policy", b.Split)
			continue
		}
		out = append(out, split)
	}
	return out, dst
}

// CheckSplit is SplitInvalid, on a management plane: a team's budget that
// cannot be split among the member clusters (SplitBudgets).
// It leaves the splits it made in f.Splits.
func CheckSplit(dst []Violation, f *Facts, env Env) []Violation {
	f.Splits, dst = SplitBudgets(dst, f, env)
	return dst
}

// MemberMark implements Env: member's high-water mark of p, 0 when it has
// none.
func (s *State) MemberMark(member string, p Pair) Amount {
	if s.fleet == nil || s.fleet.clusters[member] == nil {
		return 0
	}
	return s.fleet.clusters[member].marks[p]
}

// Splits is how a team's budgets are split among a management plane's
// members, as the last evaluation of the node computed them: nil outside a
// management plane, for a Cohort, and for budgets that break SplitInvalid.
// The slices are the state's own: do not modify them.
func (s *State) Splits(node string) []BudgetSplit {
	if m := s.members[node]; m != nil {
		return m.splits
	}
	return nil
}

// setGone puts root's goneClusters in force. A cluster declared gone with
// force is forgotten at once; one declared without is forgotten once the
// plane does not hear from it (or never did), so that a cluster that still
// answers keeps counting what it holds. The webhook refuses the latter
// write while the cluster answers (CheckGone); this keeps the promise when
// the webhook is off.
func (s *State) setGone(entries []v1beta1.GoneCluster) {
	if s.fleet == nil {
		return
	}
	s.fleet.goneSpec = entries
	s.regone()
}

// regone works out which declared clusters are forgotten now.
func (s *State) regone() {
	f := s.fleet
	if len(f.goneSpec) == 0 && len(f.gone) == 0 {
		return
	}
	next := map[string]bool{}
	for _, g := range f.goneSpec {
		if g.Force || !s.answers(g.Name) {
			next[g.Name] = true
		}
	}
	if maps.Equal(next, f.gone) {
		return
	}
	since := make(map[string]time.Time, len(next))
	for name := range next {
		since[name] = s.now
		if t, ok := f.goneSince[name]; ok && f.gone[name] {
			since[name] = t
		}
	}
	f.gone, f.goneSince = next, since
	s.holdsEverywhere()
	s.changedEverything()
	s.setMembers()
}

// answers reports whether a member, or a cluster that left the fleet
// while holding copies, answers the plane: such a cluster is not
// forgotten unless its declaration forces it (regone, CheckGone).
func (s *State) answers(name string) bool {
	if s.fleet == nil {
		return false
	}
	cl := s.fleet.clusterOf(name)
	return cl != nil && cl.reachable
}

// Gone lists the clusters the plane forgot (root's goneClusters in
// force), sorted; and those declared but still counted because they
// answer.
func (s *State) Gone() (forgotten, answering []string) {
	if s.fleet == nil {
		return nil, nil
	}
	for _, g := range s.fleet.goneSpec {
		if s.fleet.gone[g.Name] {
			forgotten = append(forgotten, g.Name)
		} else {
			answering = append(answering, g.Name)
		}
	}
	slices.Sort(forgotten)
	slices.Sort(answering)
	return forgotten, answering
}

// splitOut reports whether a member is left out of the Proportional
// splits: it has never reported, and the configured grace has passed
// since the plane started listing it.
func (s *State) splitOut(name string) bool {
	f := s.fleet
	cl := f.clusters[name]
	if cl == nil || f.reported[name] {
		return false
	}
	grace := s.cfg.MemberGrace.Duration
	return grace > 0 && !s.now.Before(cl.since.Add(grace))
}

// regrace queues every split again when a member that never reported
// has outlived its grace (a tick tells the time).
func (s *State) regrace() {
	f := s.fleet
	if f == nil || s.cfg.MemberGrace.Duration <= 0 {
		return
	}
	out := map[string]bool{}
	for _, name := range f.names {
		if s.splitOut(name) {
			out[name] = true
		}
	}
	if maps.Equal(out, f.out) {
		return
	}
	f.out = out
	// A member's grace ended: what follows is a member's doing, whatever
	// the event that told the time.
	s.cause = CauseMember
	for n := range s.members {
		s.queue(n)
	}
	s.changedEverything()
}

// recorded reports whether some team's hold record says that cluster may
// hold some of it.
func (s *State) recorded(cluster string) bool {
	for _, m := range s.members {
		if m.hold == nil {
			continue
		}
		for _, l := range m.hold.record[cluster] {
			if !l.isZero() {
				return true
			}
		}
	}
	return false
}
