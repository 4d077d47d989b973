package state

import (
	"maps"
	"math/bits"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// host is a Kubernetes Node as capacity sees it: the record of its last
// event, shared with that event (and, in the manager, with the Node
// informer's cache) and never modified, and the flavors it matches.
type host struct {
	rec     *events.Node
	flavors []string // the ResourceFlavors it matches, sorted
	// flavor is the one it counts toward, the most specific of flavors;
	// "" when it counts toward none, for reason.
	flavor, reason string
}

// Reasons capacity is unattributed.
const (
	ReasonNoMatchingFlavor = "NoMatchingFlavor"
	ReasonAmbiguousFlavor  = "AmbiguousFlavor"
)

// attribute picks the flavor m counts toward: the most specific of the
// flavors it matches, the one whose nodeLabels include every other's (and
// more). A node that matches none, or whose matches have no single most
// specific one (two with the same labels, or neither including the other),
// counts toward none. O(matches^2 x labels).
func (s *State) attribute(m *host) {
	m.flavor, m.reason = "", ""
	switch len(m.flavors) {
	case 0:
		m.reason = ReasonNoMatchingFlavor
		return
	case 1:
		m.flavor = m.flavors[0]
		return
	}
	for _, f := range m.flavors {
		most := true
		for _, g := range m.flavors {
			if g != f && !(len(s.flavors[g]) < len(s.flavors[f]) && matches(s.flavors[g], s.flavors[f])) {
				most = false
				break
			}
		}
		if most {
			m.flavor = f
			return
		}
	}
	m.reason = ReasonAmbiguousFlavor
}

// counts reports whether the node's allocatable counts: Ready, not cordoned.
func (m *host) counts() bool { return m.rec.Ready && !m.rec.Unschedulable }

// capacity is the node's status.capacity of resource r, and whether it
// lists r.
func (m *host) capacity(r string) (Amount, bool) { return amountIn(m.rec.Capacity, r) }

// allocatable is the node's status.allocatable of resource r, and whether
// it lists r.
func (m *host) allocatable(r string) (Amount, bool) { return amountIn(m.rec.Allocatable, r) }

func amountIn(l map[string]resource.Quantity, r string) (Amount, bool) {
	q, ok := l[r]
	if !ok {
		return 0, false
	}
	return AmountOf(q), true
}

// tally is the measurement of one (measured resource, known flavor) pair,
// the sum of the contributions of the nodes matching the flavor.
type tally struct {
	installed   Amount // status.capacity, every matching node
	allocatable Amount // status.allocatable, Ready uncordoned matching nodes
	unavailable Amount // status.capacity of the cordoned or NotReady ones
	carriers    int    // matching nodes that list the resource at all
}

// entry is one pair of root's status.capacity.
type entry struct {
	allocatable Amount
	mark        Amount
	observedAt  time.Time
}

func amounts(in map[string]resource.Quantity) map[string]Amount {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]Amount, len(in))
	for r, q := range in {
		out[r] = AmountOf(q)
	}
	return out
}

// upsertNode replaces a node's contribution: O(resources x flavors).
func (s *State) upsertNode(n *events.Node) {
	s.draNodeContribute(n.Name, -1)
	if old := s.hosts[n.Name]; old != nil {
		s.contribute(n.Name, old, -1)
	}
	m := &host{rec: n}
	for f, want := range s.flavors {
		if matches(want, n.Labels) {
			m.flavors = append(m.flavors, f)
		}
	}
	slices.Sort(m.flavors)
	s.attribute(m)
	s.hosts[n.Name] = m
	s.contribute(n.Name, m, +1)
	s.draNodeContribute(n.Name, +1)
	if s.synced {
		s.measure()
	}
}

func (s *State) deleteNode(name string) {
	old := s.hosts[name]
	if old == nil {
		return
	}
	s.draNodeContribute(name, -1)
	s.contribute(name, old, -1)
	delete(s.hosts, name)
	s.draNodeContribute(name, +1)
	if s.synced {
		s.measure()
	}
}

// matches reports whether a node with labels carries every one of a
// flavor's nodeLabels; a flavor without nodeLabels matches every node.
func matches(want, labels map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// contribute adds (sign +1) or removes (-1) a node's amounts to the tally
// of the flavor it counts toward (attribute), or to the unattributed
// amounts when it counts toward none. A cordoned or NotReady node's
// capacity is installed but unavailable.
func (s *State) contribute(name string, m *host, sign Amount) {
	stray := false
	for _, r := range s.cfg.MeasuredResources {
		c, hasC := m.capacity(r)
		a, hasA := m.allocatable(r)
		if !hasC && !hasA {
			continue
		}
		if m.flavor == "" {
			if c > 0 {
				stray = true
				s.unattributed[r] += sign * c
				if s.unattributed[r] == 0 {
					delete(s.unattributed, r)
				}
			}
			continue
		}
		t := s.tallies[Pair{r, m.flavor}]
		if !m.counts() {
			a = 0
			t.unavailable += sign * c
		}
		t.installed += sign * c
		t.allocatable += sign * a
		t.carriers += int(sign)
	}
	if stray {
		if sign > 0 {
			s.strays[name] = struct{}{}
		} else {
			delete(s.strays, name)
		}
	}
}

// setFlavor creates, changes (exists) or deletes (!exists) a ResourceFlavor.
// It costs O(nodes): each node's match is checked again. It takes no
// measurement: a new flavor appears on root with the next one, and a
// deleted one keeps its entries until then.
func (s *State) setFlavor(name string, labels map[string]string, exists bool) {
	old, existed := s.flavors[name]
	if exists == existed && (!exists || maps.Equal(old, labels)) {
		return
	}
	if !existed {
		for _, r := range s.resources() {
			s.tallies[Pair{r, name}] = &tally{}
		}
	}
	// Every node that matches the flavor before or after may count toward
	// another flavor now: which one is most specific reads its labels.
	var touched []string
	for node, m := range s.hosts {
		_, was := slices.BinarySearch(m.flavors, name)
		if was || (exists && matches(labels, m.rec.Labels)) {
			touched = append(touched, node)
			s.draNodeContribute(node, -1)
			s.contribute(node, m, -1)
		}
	}
	if exists {
		s.flavors[name] = labels
	} else {
		delete(s.flavors, name)
	}
	for _, node := range touched {
		m := s.hosts[node]
		i, was := slices.BinarySearch(m.flavors, name)
		now := exists && matches(labels, m.rec.Labels)
		if now && !was {
			m.flavors = slices.Insert(slices.Clone(m.flavors), i, name)
		} else if was && !now {
			m.flavors = slices.Delete(slices.Clone(m.flavors), i, i+1)
		}
		s.attribute(m)
		s.contribute(node, m, +1)
		s.draNodeContribute(node, +1)
	}
	s.rematchGlobals()
	if exists {
		if existed {
			return
		}
	} else {
		for _, r := range s.resources() {
			delete(s.tallies, Pair{r, name})
		}
	}
	s.flavorMoved(name)
}

// recount rebuilds every tally from the nodes: O(nodes), when the measured
// resources change.
func (s *State) recount() {
	clear(s.tallies)
	clear(s.unattributed)
	clear(s.strays)
	for _, r := range s.resources() {
		for f := range s.flavors {
			s.tallies[Pair{r, f}] = &tally{}
		}
	}
	for name, m := range s.hosts {
		s.attribute(m)
		s.contribute(name, m, +1)
	}
	s.recountDRA()
}

// measure takes a measurement, in O(measured resources x flavors + root's
// entries). Every measured pair has an entry. A pair that some node lists
// moves its mark by the hysteresis rule; a pair that no node lists (its
// last node gone, its flavor deleted, its resource no longer measured)
// keeps its mark, at allocatable 0, and its entry is dropped only when that
// mark is 0, a mark read back from root's status at start included. An
// entry whose figures change is stamped now; with a report interval, and
// while no source fails, so is every entry whose stamp is that old.
func (s *State) measure() {
	for _, r := range s.resources() {
		for f := range s.flavors {
			s.measurePair(Pair{r, f})
		}
	}
	for p, e := range s.entries {
		if _, measured := s.tallies[p]; measured {
			continue
		}
		if e.mark == 0 {
			delete(s.entries, p)
		} else if e.allocatable != 0 {
			e.allocatable, e.observedAt = 0, s.now
		}
	}
	if s.fleet != nil {
		s.fleet.restamp(s.now, s.cfg.ReportInterval.Duration)
	}
	if every := s.cfg.ReportInterval.Duration; every > 0 && len(s.failing) == 0 {
		// A source that fails leaves the informers' view as it was: the
		// stamps are not refreshed from it, so that they grow old and
		// show it.
		for _, e := range s.entries {
			if s.now.Sub(e.observedAt) >= every {
				e.observedAt = s.now
			}
		}
	}
}

func (s *State) measurePair(p Pair) {
	t := s.tallies[p]
	e := s.entries[p]
	if e == nil {
		e = &entry{observedAt: s.now}
		s.entries[p] = e
	}
	mark := e.mark
	if t.carriers > 0 {
		mark = nextMark(e.mark, t.installed, s.cfg.HysteresisPercent)
	}
	// A pair that no node lists is not measured at zero: it is not
	// measured, so it keeps its mark, whether this run saw its last node
	// go or read the mark back from root's status at start.
	if t.allocatable == e.allocatable && mark == e.mark {
		return
	}
	if mark != e.mark {
		s.markMoved(p)
	}
	e.allocatable, e.mark, e.observedAt = t.allocatable, mark, s.now
}

// nextMark is the hysteresis rule: installed capacity above the mark raises
// it at once; below it by more than percent of the mark, it lowers the mark
// all the way to installed; otherwise the mark stays.
func nextMark(mark, installed Amount, percent int) Amount {
	if installed > mark {
		return installed
	}
	if drop := mark - installed; drop > 0 && exceeds(drop, mark, percent) {
		return installed
	}
	return mark
}

// exceeds reports whether drop > percent% of mark, exactly (in 128 bits).
func exceeds(drop, mark Amount, percent int) bool {
	hi1, lo1 := bits.Mul64(uint64(drop), 100)
	hi2, lo2 := bits.Mul64(uint64(percent), uint64(mark))
	return hi1 > hi2 || (hi1 == hi2 && lo1 > lo2)
}

// seed reads root's high-water marks back from its stored status, before
// the first measurement: a restart does not lower them.
func (s *State) seed(stored []v1beta1.CapacityStatus) {
	old := s.entries
	s.entries = make(map[Pair]*entry, len(stored))
	for _, c := range stored {
		s.entries[Pair{c.ResourceName, c.ResourceFlavor}] = &entry{
			allocatable: AmountOf(c.Allocatable),
			mark:        AmountOf(c.HighWaterMark),
			observedAt:  c.ObservedAt.Time,
		}
	}
	for p, e := range s.entries {
		if o := old[p]; o == nil || o.mark != e.mark {
			s.markMoved(p)
		}
	}
	for p := range old {
		if s.entries[p] == nil {
			s.markMoved(p)
		}
	}
}

// markMoved queues the nodes with a budget on p: their capacity rule reads
// p's mark.
func (s *State) markMoved(p Pair) {
	for n := range s.byPair[p] {
		s.queue(n)
	}
}

// normalizeCapacity sorts a stored status.capacity by pair, with times in
// UTC whole seconds as the API server keeps them.
func normalizeCapacity(in []v1beta1.CapacityStatus) []v1beta1.CapacityStatus {
	out := make([]v1beta1.CapacityStatus, len(in))
	for i, c := range in {
		c.DeepCopyInto(&out[i])
		out[i].ObservedAt = metav1.NewTime(c.ObservedAt.UTC().Truncate(time.Second))
	}
	slices.SortStableFunc(out, func(a, b v1beta1.CapacityStatus) int {
		return Pair{a.ResourceName, a.ResourceFlavor}.Compare(Pair{b.ResourceName, b.ResourceFlavor})
	})
	return out
}

// CapacityEntry is one pair of root's capacity.
type CapacityEntry struct {
	Pair
	// Allocatable sums the pair over Ready, uncordoned nodes.
	Allocatable Amount
	// Installed sums it over every node, cordoned and NotReady included,
	// and Unavailable over the cordoned and NotReady ones alone.
	Installed, Unavailable Amount
	// HighWaterMark is the damped peak of Installed that budgets are
	// checked against.
	HighWaterMark Amount
	ObservedAt    time.Time
	// Measured is whether some node matching the flavor lists the resource;
	// an unmeasured pair keeps its mark.
	Measured bool
}

// Capacity lists root's capacity entries, by pair. Before the first
// measurement they are the marks read back from root's status.
func (s *State) Capacity() []CapacityEntry {
	out := make([]CapacityEntry, 0, len(s.entries))
	for p, e := range s.entries {
		ce := CapacityEntry{Pair: p, Allocatable: e.allocatable, HighWaterMark: e.mark, ObservedAt: e.observedAt}
		if t := s.tallies[p]; t != nil {
			ce.Installed, ce.Unavailable, ce.Measured = t.installed, t.unavailable, t.carriers > 0
		}
		out = append(out, ce)
	}
	slices.SortFunc(out, func(a, b CapacityEntry) int { return a.Pair.Compare(b.Pair) })
	return out
}

// CapacityStatus is root's status.capacity as the state has it: on a
// management plane, the members' figures (fleetCapacity).
func (s *State) CapacityStatus() []v1beta1.CapacityStatus {
	if s.fleet != nil {
		return s.fleetCapacity()
	}
	entries := s.Capacity()
	out := make([]v1beta1.CapacityStatus, len(entries))
	for i, e := range entries {
		out[i] = v1beta1.CapacityStatus{
			ResourceName: e.Resource, ResourceFlavor: e.Flavor,
			Allocatable: e.Allocatable.Quantity(), HighWaterMark: e.HighWaterMark.Quantity(),
			ObservedAt: metav1.NewTime(e.ObservedAt),
		}
	}
	return out
}

// CapacityNeedsWrite reports whether root's stored status.capacity differs
// from CapacityStatus: a figure changed, or a measurement restamped entries
// a report interval old. It is false until the first measurement (the
// Synced event) and while root does not exist. Writing the status brings back
// an AcceleratorQuota event for root that makes it false again.
func (s *State) CapacityNeedsWrite() bool {
	if !s.synced || !s.rootSeen {
		return false
	}
	cur := s.CapacityStatus()
	if len(cur) != len(s.reported) {
		return true
	}
	for i, c := range cur {
		r := s.reported[i]
		if c.ResourceName != r.ResourceName || c.ResourceFlavor != r.ResourceFlavor ||
			c.Allocatable.Cmp(r.Allocatable) != 0 || c.HighWaterMark.Cmp(r.HighWaterMark) != 0 ||
			!c.ObservedAt.Equal(&r.ObservedAt) || !slices.EqualFunc(c.PerCluster, r.PerCluster, sameClusterCapacity) {
			return true
		}
	}
	return false
}

// Synced reports whether the Synced event, and with it the first
// measurement, was applied: the state holds every object the informers
// listed at start.
func (s *State) Synced() bool { return s.synced }

// LastMeasureFailure is when the last measurement failed and why; a zero
// time when none has.
func (s *State) LastMeasureFailure() (time.Time, string) { return s.failedAt, s.failure }

// FailingSources are the sources whose list or watch fails, with why.
func (s *State) FailingSources() map[string]string { return maps.Clone(s.failing) }

// Unattributed is capacity on a node that counts toward no ResourceFlavor:
// installed amounts of a measured resource, which no budget can use, and
// why (ReasonNoMatchingFlavor, ReasonAmbiguousFlavor).
type Unattributed struct {
	Node     string
	Resource string
	Reason   string
	Amount   Amount
}

// Unattributed lists unattributed capacity by node and resource.
func (s *State) Unattributed() []Unattributed {
	var out []Unattributed
	for _, node := range sortedKeys(s.strays) {
		m := s.hosts[node]
		for _, r := range s.cfg.MeasuredResources {
			if c, _ := m.capacity(r); c > 0 {
				out = append(out, Unattributed{Node: node, Resource: r, Reason: m.reason, Amount: c})
			}
		}
	}
	return out
}

// UnattributedTotals sums unattributed capacity per resource, by resource.
func (s *State) UnattributedTotals() []Unattributed {
	var out []Unattributed
	for _, r := range sortedKeys(s.unattributed) {
		out = append(out, Unattributed{Resource: r, Amount: s.unattributed[r]})
	}
	return out
}

func sameClusterCapacity(a, b v1beta1.ClusterCapacity) bool {
	return a.Cluster == b.Cluster && a.Allocatable.Cmp(b.Allocatable) == 0 && a.HighWaterMark.Cmp(b.HighWaterMark) == 0
}
