package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// The fleet's promise: for every fleet node and pair, the members together
// may never hold more than the fleet gives. What a member "may hold" of a
// team's budget is its ceiling: the largest of what its copy was last read
// back with (R), what this replica let its copier write there since that
// read (P, the peak of the exposures), and what the team's hold record on
// the plane says (Rec). The plane's writes to a copy are conditional on
// the resourceVersion it last read, so a write made on an older read can
// never land once a newer one is read: P is reset whenever the read moves.
//
// A move lowers first and raises after. A lowering is written at once: it
// can only shrink what a member holds. A raise of member m by d is let
// through only when it fits under the team's budget and under every
// ancestor's budget on the pair, counting every member's ceiling, and only
//
//   - while this replica leads (its Leadership carries a term and nonce,
//     its mark);
//   - once the team's hold record carries this replica's mark, and so does
//     the record of every team that shares a budgeted ancestor with it (a
//     record is written with a compare-and-swap on the team's status, so
//     that a leader whose record is in place has read every record before
//     it);
//   - while m answers and holds the copy (a copy is created with zero
//     budgets and raised by a conditional update);
//   - and never beyond what the record already says: the copier may write
//     a raise only up to the record as read back (persist before expose),
//     so that a new leader, or the same plane restarted, finds in the
//     records a bound on every write that may still be in flight.
//
// A leader that finds a record of another writer takes its amounts as its
// own peaks until the copy is read again. Everything here is a function of
// the events: the same log gives the same holds.

// Limits are the two amounts of a fleet budget that the members together
// may hold at most: nominal, and borrowingLimit (a fleet total, split as
// the nominal is).
type Limits struct{ Nominal, Borrow Amount }

func (l Limits) max(o Limits) Limits {
	return Limits{max(l.Nominal, o.Nominal), max(l.Borrow, o.Borrow)}
}

func (l Limits) isZero() bool { return l.Nominal == 0 && l.Borrow == 0 }

// CopyPlan is what the copier should do with one team's copy on one
// member: write Budgets (conditional on Version, the resourceVersion it
// read; an empty Version creates the copy, always with zero budgets), or
// delete it.
//
// Fence, when set, is the version the write must move the copy away from
// even if nothing else of it changes (v1beta1.FenceAnnotation): this
// replica let through more than the copy holds, and only a new version
// proves that it can no longer land.
type CopyPlan struct {
	Version string
	Fence   string
	Budgets []PlanBudget
	Delete  bool
}

// PlanBudget is one budget of a copy to write.
type PlanBudget struct {
	Pair
	Nominal, Borrow Amount
}

// Wait is a raise of a member's copy that has to wait, and why.
type Wait struct {
	Pair
	// From is what the member may hold now, To what its share asks.
	From, To Amount
	Message  string
	Since    time.Time
	// Holders are the other members whose release the raise waits for:
	// they may hold more than their share. None when it waits for
	// something else (the member itself does not answer, the record, the
	// teams under an ancestor's budget).
	Holders []string
}

// String says what the raise waits for: "raise of nvidia.com/gpu@a100
// from 5 to 6: waits for west to release 1 (...)".
func (w Wait) String() string {
	return fmt.Sprintf("raise of %s from %s to %s: %s", w.Pair, w.From, w.To, w.Message)
}

func (w Wait) equal(o Wait) bool {
	return w.Pair == o.Pair && w.From == o.From && w.To == o.To && w.Message == o.Message && w.Since.Equal(o.Since) &&
		slices.Equal(w.Holders, o.Holders)
}

// nodeHold is a plane team's holds: the record its status carries, and
// what the last computation made of it. It is never modified once made:
// a change makes a new one (the state's clones share it).
type nodeHold struct {
	record  map[string]map[Pair]Limits // status.holds, by cluster
	writer  string
	guarded bool
	// plans are what the copier should do, by cluster; want the record
	// the leader should write (nil: the one in place stands).
	plans map[string]CopyPlan
	want  *v1beta1.FleetHolds
	waits map[string]Wait
}

// exposure is the most this replica let the copier write to one copy
// since the copy was read at version.
type exposure struct {
	version string
	peak    map[Pair]Limits
}

// recordOf reads a hold record.
func recordOf(h *v1beta1.FleetHolds) (map[string]map[Pair]Limits, string) {
	if h == nil {
		return nil, ""
	}
	out := make(map[string]map[Pair]Limits, len(h.Clusters))
	for _, c := range h.Clusters {
		bs := make(map[Pair]Limits, len(c.Budgets))
		for _, b := range c.Budgets {
			bs[Pair{b.ResourceName, b.ResourceFlavor}] = Limits{AmountOf(b.Nominal), AmountOf(b.BorrowingLimit)}
		}
		out[c.Cluster] = bs
	}
	return out, h.Writer
}

// termOf is the term of a writer's mark, TERM/NONCE; false when it does
// not parse.
func termOf(mark string) (uint64, bool) {
	t, _, ok := strings.Cut(mark, "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(t, 10, 64)
	return n, err == nil
}

// setHoldRecord keeps what a plane team's status says of its holds.
func (s *State) setHoldRecord(m *member, q *events.Quota) {
	if s.fleet == nil {
		return
	}
	rec, writer := recordOf(q.Holds)
	old := m.hold
	if old != nil && old.writer == writer && old.guarded == q.Guarded && maps.EqualFunc(old.record, rec, maps.Equal) {
		return
	}
	h := &nodeHold{record: rec, writer: writer, guarded: q.Guarded}
	if old != nil {
		h.plans, h.want, h.waits = old.plans, old.want, old.waits
	}
	m.hold = h
	s.holdsDirty(m.name)
	s.holdsPendingAll()
}

// holdsDirty asks for a team's holds to be computed again.
func (s *State) holdsDirty(name string) {
	if s.fleet != nil {
		s.fleet.dirty[name] = struct{}{}
	}
}

// holdsEverywhere asks for every team's holds to be computed again.
func (s *State) holdsEverywhere() {
	if s.fleet != nil {
		s.fleet.dirtyAll = true
	}
}

// holdsPendingAll asks again for every raise that waits: a ceiling may
// have come down.
func (s *State) holdsPendingAll() {
	if s.fleet != nil {
		s.fleet.retryPending = true
	}
}

// settleHolds computes the holds of the teams that asked, in name order,
// once the phases have settled.
func (s *State) settleHolds() {
	f := s.fleet
	if f == nil {
		return
	}
	if f.dirtyAll {
		for name := range s.members {
			f.dirty[name] = struct{}{}
		}
	}
	if len(f.dirty) > 0 || f.retryPending {
		for name := range f.pending {
			f.dirty[name] = struct{}{}
		}
	}
	f.dirtyAll, f.retryPending = false, false
	if len(f.dirty) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(f.dirty))
	clear(f.dirty)
	for _, name := range names {
		if m := s.members[name]; m != nil {
			s.evalHolds(m)
		}
	}
}

// holdClusters are the clusters a team's holds read: the fleet's members,
// the clusters that left it while holding copies, and any cluster its
// record or a copy names; never a gone one. Sorted.
func (s *State) holdClusters(name string, h *nodeHold) []string {
	f := s.fleet
	if len(f.leaving) == 0 && f.plainNames() && (h == nil || recordWithin(h.record, f.clusters)) {
		// The common case, without a set and a sort per team: the
		// members, which f.names holds sorted. Callers only read it.
		return f.names
	}
	set := map[string]bool{}
	for _, c := range f.names {
		set[c] = true
	}
	for c, cl := range f.leaving {
		if _, ok := copyIn(cl.copies, name); ok {
			set[c] = true
		}
	}
	if h != nil {
		for c := range h.record {
			set[c] = true
		}
	}
	for c := range set {
		if f.gone[c] || f.released[c] {
			delete(set, c)
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// plainNames reports whether no member is declared gone or released, so
// that the members are the clusters every team's holds read.
func (f *fleet) plainNames() bool {
	for _, c := range f.names {
		if f.gone[c] || f.released[c] {
			return false
		}
	}
	return true
}

// recordWithin reports whether every cluster a record names is a member.
func recordWithin[V any](record map[string]V, members map[string]*cluster) bool {
	for c := range record {
		if members[c] == nil {
			return false
		}
	}
	return true
}

// clusterOf is a member, or a cluster that left holding copies; nil for
// any other.
func (f *fleet) clusterOf(name string) *cluster {
	if cl := f.clusters[name]; cl != nil {
		return cl
	}
	return f.leaving[name]
}

func copyIn(cps []events.MemberCopy, node string) (events.MemberCopy, bool) {
	if i, ok := slices.BinarySearchFunc(cps, node, func(c events.MemberCopy, n string) int { return cmp.Compare(c.Node, n) }); ok {
		return cps[i], true
	}
	return events.MemberCopy{}, false
}

// readOf is what cluster c's copy of node holds, by pair, as last read,
// and its version ("" when it holds none).
func (s *State) readOf(c, node string) (map[Pair]Limits, string) {
	cl := s.fleet.clusterOf(c)
	if cl == nil {
		return nil, ""
	}
	cp, ok := copyIn(cl.copies, node)
	if !ok {
		return nil, ""
	}
	out := make(map[Pair]Limits, len(cp.Budgets))
	for _, b := range cp.Budgets {
		out[Pair{b.Resource, b.Flavor}] = Limits{AmountOf(b.Nominal), AmountOf(b.BorrowingLimit)}
	}
	version := cp.Version
	if version == "" {
		// A copy read before reads carried versions: present all the same.
		version = "?"
	}
	return out, version
}

// peakOf is the most this replica let the copier write to c's copy of
// node since its read at version.
func (s *State) peakOf(c, node, version string) map[Pair]Limits {
	cl := s.fleet.clusterOf(c)
	if cl == nil {
		return nil
	}
	if e, ok := cl.exposed[node]; ok && e.version == version {
		return e.peak
	}
	return nil
}

// ceiling is the most cluster c may hold of node's pair p.
func (s *State) ceiling(c, node string, h *nodeHold, p Pair) Limits {
	read, version := s.readOf(c, node)
	out := read[p].max(s.peakOf(c, node, version)[p])
	if h != nil {
		out = out.max(h.record[c][p])
	}
	return out
}

// heldUnder sums, over every team at or below node and every cluster, the
// nominal each may hold of p.
func (s *State) heldUnder(node string, p Pair) Amount {
	var sum Amount
	var walk func(n string, depth int)
	walk = func(n string, depth int) {
		m := s.members[n]
		if m == nil || depth > len(s.members) {
			return
		}
		if m.shape.role == v1beta1.RoleClusterQueue {
			for _, c := range s.holdClusters(n, m.hold) {
				sum += s.ceiling(c, n, m.hold, p).Nominal
			}
			return
		}
		for _, k := range s.kids[n] {
			walk(k, depth+1)
		}
	}
	walk(node, 0)
	return sum
}

// recordsCurrentUnder reports whether every team at or below node has no
// record, or one of this replica's mark; the first that does not, if any.
func (s *State) recordsCurrentUnder(node string) (bool, string) {
	bad := ""
	var walk func(n string, depth int)
	walk = func(n string, depth int) {
		m := s.members[n]
		if m == nil || bad != "" || depth > len(s.members) {
			return
		}
		if m.shape.role == v1beta1.RoleClusterQueue {
			if h := m.hold; h != nil && len(h.record) > 0 && h.writer != s.mark {
				bad = n
			}
			return
		}
		for _, k := range s.kids[n] {
			walk(k, depth+1)
		}
	}
	walk(node, 0)
	return bad == "", bad
}

// targets are a team's shares, by cluster and pair: the nominal from its
// splits, the borrowingLimit split in proportion to it. None for a team
// that is not Ready or is being deleted.
func (s *State) targets(m *member) map[string]map[Pair]Limits {
	out := map[string]map[Pair]Limits{}
	if m.phase != PhaseReady || m.deleting {
		return out
	}
	at := func(c string) map[Pair]Limits {
		if out[c] == nil {
			out[c] = map[Pair]Limits{}
		}
		return out[c]
	}
	for _, sp := range m.splits {
		var bl *Amount
		for _, b := range m.spec.Budgets {
			if b.ResourceName == sp.Resource && b.ResourceFlavor == sp.Flavor && b.BorrowingLimit != nil {
				a := AmountOf(*b.BorrowingLimit)
				bl = &a
			}
		}
		weights := make([]Weight, 0, len(sp.Shares))
		for _, sh := range sp.Shares {
			if sh.Amount > 0 && !s.fleet.gone[sh.Cluster] {
				l := at(sh.Cluster)[sp.Pair]
				l.Nominal = sh.Amount
				at(sh.Cluster)[sp.Pair] = l
				weights = append(weights, Weight{Cluster: sh.Cluster, Mark: sh.Amount})
			}
		}
		if bl == nil || *bl == 0 || len(weights) == 0 {
			continue
		}
		borrow, err := SplitProportional(*bl, weights)
		if err != nil {
			continue
		}
		for _, sh := range borrow {
			l := at(sh.Cluster)[sp.Pair]
			l.Borrow = sh.Amount
			at(sh.Cluster)[sp.Pair] = l
		}
	}
	return out
}

// fleetBudget is a node's fleet budget of p; false when it has none.
func fleetBudget(m *member, p Pair) (Limits, bool) {
	for _, b := range m.spec.Budgets {
		if b.ResourceName == p.Resource && b.ResourceFlavor == p.Flavor {
			l := Limits{Nominal: AmountOf(b.Nominal)}
			if b.BorrowingLimit != nil {
				l.Borrow = AmountOf(*b.BorrowingLimit)
			}
			return l, true
		}
	}
	return Limits{}, false
}

// evalHolds computes one plane team's plans, waits and the record to
// write.
func (s *State) evalHolds(m *member) {
	f := s.fleet
	old := m.hold
	h := &nodeHold{}
	if old != nil {
		h.record, h.writer, h.guarded = old.record, old.writer, old.guarded
	}
	delete(f.pending, m.name)
	if m.shape.role != v1beta1.RoleClusterQueue {
		if old != nil && (old.plans != nil || old.want != nil || old.waits != nil) {
			s.changedNode(m.name)
		}
		m.hold = h
		return
	}
	held := m.phase != PhaseReady && !m.deleting // frozen: its copies stay as they are
	clusters := s.holdClusters(m.name, h)
	targets := s.targets(m)
	mine := s.mark != "" && h.writer == s.mark
	writable := s.mark != "" && (len(h.record) == 0 || h.writer == s.mark || s.mayOverwrite(h.writer))
	// A record of another writer: its amounts may still be written by it
	// on the copies as read now.
	inherit := s.mark != "" && len(h.record) > 0 && h.writer != s.mark
	reads := make(map[string]map[Pair]Limits, len(clusters))
	versions := make(map[string]string, len(clusters))
	peaks := make(map[string]map[Pair]Limits, len(clusters))
	pairs := map[Pair]bool{}
	for _, c := range clusters {
		reads[c], versions[c] = s.readOf(c, m.name)
		peak := maps.Clone(s.peakOf(c, m.name, versions[c]))
		if peak == nil {
			peak = map[Pair]Limits{}
		}
		if inherit && versions[c] != "" {
			for p, l := range h.record[c] {
				peak[p] = peak[p].max(l)
			}
		}
		peaks[c] = peak
		for p := range reads[c] {
			pairs[p] = true
		}
		for p := range h.record[c] {
			pairs[p] = true
		}
		for p := range targets[c] {
			pairs[p] = true
		}
	}
	ceil := func(c string, p Pair) Limits {
		return reads[c][p].max(peaks[c][p]).max(h.record[c][p])
	}
	allow := make(map[string]map[Pair]Limits, len(clusters))
	waits := map[string]Wait{}
	for _, p := range slices.SortedFunc(maps.Keys(pairs), Pair.Compare) {
		budget, _ := fleetBudget(m, p)
		var total Limits
		for _, c := range clusters {
			l := ceil(c, p)
			total.Nominal += l.Nominal
			total.Borrow += l.Borrow
		}
		// Why a raise of this pair cannot go now, whoever it is for.
		blocked := ""
		switch {
		case held:
			blocked = "the team is not Ready: its copies are held as they are"
		case s.mark == "":
			blocked = "this replica does not lead"
		case !h.guarded:
			blocked = "the team does not carry the plane's finalizer " + v1beta1.CopiesFinalizer + " yet"
		case !writable:
			blocked = fmt.Sprintf("the team's hold record was written by a later leader (%s): this replica's lead (%s) is not the newest", h.writer, s.mark)
		case !mine:
			blocked = "the team's hold record is not yet written by this leader"
		}
		ancestors := s.budgetedAncestors(m, p)
		if blocked == "" {
			for _, a := range ancestors {
				if ok, who := s.recordsCurrentUnder(a); !ok {
					blocked = fmt.Sprintf("the hold record of %s, under %s's budget, is not yet written by this leader", who, a)
					break
				}
			}
		}
		for _, c := range clusters {
			want := targets[c][p]
			cur := ceil(c, p)
			a := Limits{Nominal: want.Nominal, Borrow: want.Borrow}
			if held {
				a = reads[c][p]
			}
			why := blocked
			if why == "" {
				switch {
				case !s.Reachable(c):
					why = c + " does not answer"
				case versions[c] == "":
					why = "the copy is being created on " + c
				}
			}
			// A lowering (at or below what the copy holds) goes at once. A
			// raise above the copy's read goes only as far as the room that
			// every other member's ceiling leaves, under the team's budget
			// and every budgeted ancestor's.
			r := reads[c][p]
			raise := func(want, read, cur Amount, room func() Amount) (Amount, Amount) {
				if want <= read {
					return want, 0
				}
				limit := read
				if why == "" {
					limit = max(read, room())
				}
				a := min(want, limit)
				return a, want - a
			}
			var shortN, shortB Amount
			if !held {
				a.Nominal, shortN = raise(want.Nominal, r.Nominal, cur.Nominal, func() Amount {
					room := budget.Nominal - (total.Nominal - cur.Nominal)
					for _, anc := range ancestors {
						ab, _ := fleetBudget(s.members[anc], p)
						room = min(room, ab.Nominal-(s.heldUnderExcept(anc, p, m.name, clusters, ceil)-cur.Nominal))
					}
					return room
				})
				a.Borrow, shortB = raise(want.Borrow, r.Borrow, cur.Borrow, func() Amount { return budget.Borrow - (total.Borrow - cur.Borrow) })
			}
			if grown := a.max(cur); grown != cur {
				total.Nominal += grown.Nominal - cur.Nominal
				total.Borrow += grown.Borrow - cur.Borrow
				// What it may now be let to write counts as held at once.
				peaks[c][p] = peaks[c][p].max(a)
			}
			if allow[c] == nil {
				allow[c] = map[Pair]Limits{}
			}
			allow[c][p] = a
			if shortN > 0 || shortB > 0 {
				msg := why
				var holders []string
				if msg == "" {
					msg, holders = s.blockers(m, p, c, clusters, ceil, targets, ancestors)
				}
				w := Wait{Pair: p, From: cur.Nominal, To: want.Nominal, Message: msg, Since: s.now, Holders: holders}
				if shortN == 0 {
					w.From, w.To = cur.Borrow, want.Borrow
					w.Message = "borrowingLimit: " + msg
				}
				if prev, ok := m.waitOn(c); ok {
					w.Since = prev.Since
				}
				if _, dup := waits[c]; !dup {
					waits[c] = w
				}
			}
		}
	}
	// What the copier may write: a lowering at once, a raise only up to
	// what this leader's record already says.
	h.plans = map[string]CopyPlan{}
	for _, c := range clusters {
		if held {
			continue
		}
		wantCopy := false
		for _, l := range targets[c] {
			if l.Nominal > 0 {
				wantCopy = true
			}
		}
		switch {
		case !wantCopy && versions[c] == "":
			continue
		case !wantCopy:
			h.plans[c] = CopyPlan{Version: versions[c], Delete: true}
			continue
		}
		plan := CopyPlan{Version: versions[c]}
		if plan.Version == "?" {
			plan.Version = ""
		}
		for _, p := range slices.SortedFunc(maps.Keys(pairs), Pair.Compare) {
			a, r := allow[c][p], reads[c][p]
			if targets[c][p].Nominal == 0 && a.Nominal == 0 {
				continue
			}
			var e Limits
			if versions[c] != "" {
				e.Nominal = expose(a.Nominal, r.Nominal, mine, h.record[c][p].Nominal)
				e.Borrow = expose(a.Borrow, r.Borrow, mine, h.record[c][p].Borrow)
			}
			plan.Budgets = append(plan.Budgets, PlanBudget{Pair: p, Nominal: e.Nominal, Borrow: e.Borrow})
			peaks[c][p] = peaks[c][p].max(e)
		}
		// A peak above the copy that nothing on its way is meant to reach
		// any more (a write lost, a raise taken back) holds room until the
		// copy's version moves: fence it, so that the write moves it.
		if versions[c] != "" && plan.Version != "" {
			stale, rising := false, false
			for p, pk := range peaks[c] {
				r, a := reads[c][p], allow[c][p]
				if a.Nominal > r.Nominal || a.Borrow > r.Borrow {
					rising = true
				}
				if pk.Nominal > r.Nominal || pk.Borrow > r.Borrow {
					stale = true
				}
			}
			if stale && !rising {
				plan.Fence = plan.Version
			}
		}
		h.plans[c] = plan
	}
	// The peaks of what was let through, per copy as read.
	for _, c := range clusters {
		cl := f.clusterOf(c)
		if cl == nil {
			continue
		}
		cur := cl.exposed[m.name]
		next := exposure{version: versions[c], peak: peaks[c]}
		if versions[c] == "" || len(next.peak) == 0 {
			if _, ok := cl.exposed[m.name]; ok {
				cl.exposed = maps.Clone(cl.exposed)
				delete(cl.exposed, m.name)
			}
			continue
		}
		if cur.version != next.version || !maps.Equal(cur.peak, next.peak) {
			cl.exposed = maps.Clone(cl.exposed)
			if cl.exposed == nil {
				cl.exposed = map[string]exposure{}
			}
			cl.exposed[m.name] = next
		}
	}
	// The record to write: what each member may hold, with every raise let
	// through counted.
	if writable && !held {
		rec := &v1beta1.FleetHolds{Writer: s.mark}
		for _, c := range clusters {
			ch := v1beta1.ClusterHolds{Cluster: c}
			for _, p := range slices.SortedFunc(maps.Keys(pairs), Pair.Compare) {
				l := reads[c][p].max(peaks[c][p])
				if !mine || !s.heard(c) {
					// Another writer's amounts, or those of a cluster this
					// process has not read yet: nothing known here bounds
					// what it holds better.
					l = l.max(h.record[c][p])
				}
				if l.isZero() {
					continue
				}
				hb := v1beta1.HeldBudget{ResourceName: p.Resource, ResourceFlavor: p.Flavor, Nominal: l.Nominal.Quantity()}
				if l.Borrow > 0 {
					hb.BorrowingLimit = l.Borrow.Quantity()
				}
				ch.Budgets = append(ch.Budgets, hb)
			}
			if len(ch.Budgets) > 0 {
				rec.Clusters = append(rec.Clusters, ch)
			}
		}
		if !mine || !sameRecord(rec, h.record) {
			h.want = rec
		}
	}
	if len(waits) > 0 {
		h.waits = waits
		f.pending[m.name] = struct{}{}
	}
	if old == nil || !samePlans(old.plans, h.plans) || !sameWaits(old.waits, h.waits) || (old.want == nil) != (h.want == nil) ||
		(h.want != nil && !sameRecord(h.want, recordOfMust(old.want))) {
		s.changedNode(m.name)
	}
	m.hold = h
}

// heard reports whether this process has read cluster c's copies: a
// member or leaving cluster that answered since the plane started.
func (s *State) heard(c string) bool {
	cl := s.fleet.clusterOf(c)
	return cl != nil && cl.heard
}

// expose is what the copier may write of an allowance a to a copy read
// at r: a lowering at once; a raise only up to the record when this
// leader wrote it, else nothing above r.
func expose(a, r Amount, mine bool, rec Amount) Amount {
	switch {
	case a <= r:
		return a
	case mine:
		return max(r, min(a, rec))
	}
	return r
}

// mayOverwrite reports whether this leader may write over a record of
// writer: one of an earlier or the same term (a predecessor, or a plane
// without leader election restarted), never one of a later term.
func (s *State) mayOverwrite(writer string) bool {
	t, ok := termOf(writer)
	return !ok || t <= s.markTerm
}

// budgetedAncestors are the node's ancestors with a budget on p, nearest
// first.
func (s *State) budgetedAncestors(m *member, p Pair) []string {
	var out []string
	for cur, steps := s.members[m.shape.parent], 0; cur != nil && steps <= len(s.members); cur, steps = s.members[cur.shape.parent], steps+1 {
		if _, ok := fleetBudget(cur, p); ok {
			out = append(out, cur.name)
		}
		if cur.shape.parent == "" || cur.name == v1beta1.RootName {
			break
		}
	}
	return out
}

// heldUnderExcept is heldUnder(anc, p) with team's ceilings as ceil gives
// them (they move while its holds are computed).
func (s *State) heldUnderExcept(anc string, p Pair, team string, clusters []string, ceil func(string, Pair) Limits) Amount {
	m := s.members[team]
	sum := s.heldUnder(anc, p)
	for _, c := range s.holdClusters(team, m.hold) {
		sum -= s.ceiling(c, team, m.hold, p).Nominal
	}
	for _, c := range clusters {
		sum += ceil(c, p).Nominal
	}
	return sum
}

// blockers says, for a raise that does not fit, who holds more than its
// share: the members of the team itself (also returned, by name), then of
// the teams under each budgeted ancestor.
func (s *State) blockers(m *member, p Pair, to string, clusters []string, ceil func(string, Pair) Limits,
	targets map[string]map[Pair]Limits, ancestors []string) (string, []string) {
	var over, holders []string
	for _, c := range clusters {
		if c == to {
			continue
		}
		if held, share := ceil(c, p).Nominal, targets[c][p].Nominal; held > share {
			over = append(over, fmt.Sprintf("%s to release %s (it may hold %s, its share is %s%s)", c, held-share, held, share, s.unreachableNote(c)))
			holders = append(holders, c)
		}
	}
	if len(over) > 0 {
		return "waits for " + joinFew(over), holders
	}
	for _, a := range ancestors {
		ab, _ := fleetBudget(s.members[a], p)
		return fmt.Sprintf("waits for the teams under %s to release: they may hold more of %s than its budget of %s leaves room for", a, p, ab.Nominal), nil
	}
	return "waits: the team's budget leaves no room", nil
}

func (s *State) unreachableNote(c string) string {
	if !s.Reachable(c) {
		return "; it does not answer"
	}
	return ""
}

func joinFew(items []string) string {
	if len(items) > 3 {
		return strings.Join(items[:3], ", ") + fmt.Sprintf(" and %d more", len(items)-3)
	}
	return strings.Join(items, ", ")
}

func (m *member) waitOn(c string) (Wait, bool) {
	if m.hold == nil {
		return Wait{}, false
	}
	w, ok := m.hold.waits[c]
	return w, ok
}

func sameRecord(a *v1beta1.FleetHolds, b map[string]map[Pair]Limits) bool {
	ra, _ := recordOf(a)
	return maps.EqualFunc(ra, b, maps.Equal)
}

func recordOfMust(h *v1beta1.FleetHolds) map[string]map[Pair]Limits {
	r, _ := recordOf(h)
	return r
}

func samePlans(a, b map[string]CopyPlan) bool {
	return maps.EqualFunc(a, b, func(x, y CopyPlan) bool {
		return x.Version == y.Version && x.Fence == y.Fence && x.Delete == y.Delete && slices.Equal(x.Budgets, y.Budgets)
	})
}

func sameWaits(a, b map[string]Wait) bool {
	return maps.EqualFunc(a, b, Wait.equal)
}

// Plans are what the copier should do with a plane team's copies, by
// cluster; nil outside a plane, for a Cohort, and for a team whose copies
// are held as they are. Do not modify the result.
func (s *State) Plans(node string) map[string]CopyPlan {
	if m := s.members[node]; m != nil && m.hold != nil {
		return m.hold.plans
	}
	return nil
}

// HoldRecord is the record the leader should write on a plane team's
// status (status.holds); false when the one in place stands.
func (s *State) HoldRecord(node string) (*v1beta1.FleetHolds, bool) {
	if m := s.members[node]; m != nil && m.hold != nil && m.hold.want != nil {
		return m.hold.want, true
	}
	return nil, false
}

// StoredHoldRecord is the record a plane team's status carries, as last
// read.
func (s *State) StoredHoldRecord(node string) *v1beta1.FleetHolds {
	m := s.members[node]
	if m == nil || m.hold == nil || m.hold.writer == "" {
		return nil
	}
	out := &v1beta1.FleetHolds{Writer: m.hold.writer}
	for _, c := range slices.Sorted(maps.Keys(m.hold.record)) {
		ch := v1beta1.ClusterHolds{Cluster: c}
		for _, p := range slices.SortedFunc(maps.Keys(m.hold.record[c]), Pair.Compare) {
			l := m.hold.record[c][p]
			hb := v1beta1.HeldBudget{ResourceName: p.Resource, ResourceFlavor: p.Flavor, Nominal: l.Nominal.Quantity()}
			if l.Borrow > 0 {
				hb.BorrowingLimit = l.Borrow.Quantity()
			}
			ch.Budgets = append(ch.Budgets, hb)
		}
		out.Clusters = append(out.Clusters, ch)
	}
	return out
}

// Waits are the raises of a plane team's copies that wait, by cluster.
func (s *State) Waits(node string) map[string]Wait {
	if m := s.members[node]; m != nil && m.hold != nil {
		return m.hold.waits
	}
	return nil
}

// Ceiling is the most cluster may hold of a plane team's budget of p: its
// copy as read, what this replica let the copier write since, and the
// team's hold record, whichever is largest.
func (s *State) Ceiling(node, cluster string, p Pair) Limits {
	if s.fleet == nil || s.fleet.gone[cluster] || s.fleet.released[cluster] {
		return Limits{}
	}
	m := s.members[node]
	var h *nodeHold
	if m != nil {
		h = m.hold
	}
	return s.ceiling(cluster, node, h, p)
}

// FleetHeld sums, for a plane node of the tree, what the members may hold
// of its pair p: over its teams and every cluster.
func (s *State) FleetHeld(node string, p Pair) Amount {
	if s.fleet == nil {
		return 0
	}
	return s.heldUnder(node, p)
}

// Releasable reports whether a plane team being deleted may let its
// finalizer go: no cluster that is not gone is known to hold a copy of it
// (one that does not answer, and that its record says may hold some, is
// not known not to).
func (s *State) Releasable(node string) bool {
	m := s.members[node]
	if s.fleet == nil || m == nil || !m.deleting || m.hold == nil || !m.hold.guarded {
		return false
	}
	for _, c := range s.holdClusters(node, m.hold) {
		if _, v := s.readOf(c, node); v != "" {
			return false
		}
		if cl := s.fleet.clusterOf(c); cl != nil && cl.reachable {
			continue
		}
		for _, l := range m.hold.record[c] {
			if !l.isZero() {
				return false
			}
		}
	}
	return true
}

// Guarded reports whether a plane team carries the copies finalizer, as
// last read.
func (s *State) Guarded(node string) bool {
	m := s.members[node]
	return m != nil && m.hold != nil && m.hold.guarded
}

// Mark is this replica's mark as the leader (TERM/NONCE), "" while it
// does not lead or its Leadership carried none.
func (s *State) Mark() string { return s.mark }

// waitSince renders a wait's start for a status.
func waitSince(w Wait) *metav1.Time {
	t := metav1.NewTime(w.Since)
	return &t
}

// MemberShares are a plane team's shares, by cluster and pair: what its
// split gives each member (nominal) and the fleet's borrowingLimit split
// as the nominal is (Borrow). None for a team that is not Ready or is
// being deleted, nor outside a plane.
func (s *State) MemberShares(node string) map[string]map[Pair]Limits {
	m := s.members[node]
	if s.fleet == nil || m == nil || m.shape.role != v1beta1.RoleClusterQueue {
		return nil
	}
	return s.targets(m)
}
