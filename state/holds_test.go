package state

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// fleetWorld is a management plane's world for the holds' tests: the
// plane's tree as its API server stores it, each member's copies as
// theirs do, the writes on their way, and the state of the replica that
// leads, which learns of all this only through events. Writes behave as
// the API servers' do: a copy's write is conditional on the version it
// was made from, a create fails on a copy that exists, a status write is
// conditional on the node's version; a write to a member the plane cannot
// reach waits in its link, and may land once the link is back.
type fleetWorld struct {
	t       testing.TB
	st      *State
	now     time.Time
	rv      uint64 // versions only grow, as etcd's revision does
	term    uint64
	nonce   int
	grace   time.Duration
	members []string
	listed  map[string]bool
	reach   map[string]bool
	marks   map[string]Amount
	copies  map[string]map[string]*worldCopy // member -> node -> copy
	nodes   map[string]*worldNode
	flight  []flightWrite
	gone    []v1beta1.GoneCluster
	// held is, per (node, pair), what the members may hold as the last
	// check found it.
	held map[string]Limits
	// stats count what the run went through, so that a run that tested
	// nothing shows.
	stats holdStats
}

type holdStats struct {
	raises, lowers, waits, contested, restartsInFlight int
}

type worldCopy struct {
	version, fence string
	budgets        map[Pair]Limits
}

type worldNode struct {
	spec              v1beta1.AcceleratorQuotaSpec
	capacity          []v1beta1.CapacityStatus // root's, as the leader wrote it
	holds             *v1beta1.FleetHolds
	version           uint64
	gen               int64
	deleting, guarded bool
}

// flightWrite is a write on its way: to a member's copy (member set), or
// to a plane node's status or metadata (member empty).
type flightWrite struct {
	member, node string
	cond         string // the copy's version it is made from; "" creates it
	fence        string
	budgets      map[Pair]Limits
	del          bool
	// A plane write, conditional on the node's version.
	nodeCond uint64
	holds    *v1beta1.FleetHolds
	guard    bool
	release  bool
}

var holdPair = Pair{"nvidia.com/gpu", "a100"}

func newFleetWorld(t testing.TB, members ...string) *fleetWorld {
	w := &fleetWorld{t: t, now: t0, members: members, listed: map[string]bool{}, reach: map[string]bool{}, marks: map[string]Amount{},
		copies: map[string]map[string]*worldCopy{}, nodes: map[string]*worldNode{}, held: map[string]Limits{}}
	for _, m := range members {
		w.listed[m], w.reach[m], w.marks[m] = true, true, 40000
		w.copies[m] = map[string]*worldCopy{}
	}
	w.putNode("root", v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort})
	w.restart()
	return w
}

func (w *fleetWorld) apply(evs ...events.Event) {
	for _, ev := range evs {
		w.st.Apply(ev)
	}
}

func (w *fleetWorld) nextRV() uint64 { w.rv++; return w.rv }

// putNode writes a node's spec on the plane.
func (w *fleetWorld) putNode(name string, spec v1beta1.AcceleratorQuotaSpec) {
	n := w.nodes[name]
	if n == nil {
		n = &worldNode{}
		w.nodes[name] = n
	}
	n.spec, n.gen, n.version = spec, n.gen+1, w.nextRV()
	if w.st != nil {
		w.inform(name)
	}
}

// inform is the plane's informer delivering a node as stored.
func (w *fleetWorld) inform(name string) {
	n := w.nodes[name]
	if n == nil {
		w.apply(events.Event{Time: w.now, Kind: events.KindAcceleratorQuota, Op: events.OpDelete, Key: name, Version: w.nextRV()})
		return
	}
	q := &events.Quota{Name: name, UID: "uid-" + name, Generation: n.gen, Spec: *n.spec.DeepCopy(), Deleting: n.deleting, Guarded: n.guarded,
		Capacity: n.capacity}
	if n.holds != nil {
		q.Holds = n.holds.DeepCopy()
	}
	ev := events.QuotaUpserted(w.now, q)
	ev.Version = n.version
	w.apply(ev)
}

// report is a member's source publishing what the plane reads of it.
func (w *fleetWorld) report(m string) {
	if !w.listed[m] && !slices.ContainsFunc(w.st.Leaving(), func(v MemberView) bool { return v.Name == m }) {
		return
	}
	if !w.reach[m] {
		w.apply(events.MemberLost(w.now, m, "the link is cut"))
		return
	}
	ev := events.MemberSeen(w.now, m, []string{"a100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
		Allocatable: w.marks[m].Quantity(), HighWaterMark: w.marks[m].Quantity()}})
	for _, node := range slices.Sorted(maps.Keys(w.copies[m])) {
		c := w.copies[m][node]
		mc := events.MemberCopy{Node: node, Version: c.version}
		for _, p := range slices.SortedFunc(maps.Keys(c.budgets), Pair.Compare) {
			l := c.budgets[p]
			mc.Budgets = append(mc.Budgets, events.CopyBudget{Resource: p.Resource, Flavor: p.Flavor, Nominal: l.Nominal.Quantity(), BorrowingLimit: l.Borrow.Quantity()})
		}
		ev.Member.Copies = append(ev.Member.Copies, mc)
	}
	w.apply(ev)
}

// restart is the plane's leader replaced by a new process (a failover, or
// the same plane started again): it knows only what it lists and reads.
// The old leader's writes on their way still are.
func (w *fleetWorld) restart() {
	w.st = New()
	c := events.DefaultConfig()
	c.Mode, c.MemberGrace.Duration = events.ModeManagement, w.grace
	w.apply(events.ConfigChanged(w.now, c))
	for _, m := range slices.Sorted(maps.Keys(w.listed)) {
		if w.listed[m] {
			w.apply(events.MembershipChanged(w.now, m, events.Membership{Member: true, Source: "test"}))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.nodes)) {
		w.inform(name)
	}
	w.apply(events.Synced(w.now))
	for _, m := range w.members {
		w.report(m)
	}
	w.term += 2
	w.nonce++
	ev := events.LeadershipChanged(w.now, "replica-"+strconv.Itoa(w.nonce), events.LeadershipAcquired)
	ev.Leadership.Term, ev.Leadership.Nonce = w.term, "n"+strconv.Itoa(w.nonce)
	w.apply(ev)
}

// pass is the leader's shell doing what the state asks: the finalizer on
// each team, each hold record the state wants (conditional on the version
// the state read), each copy's write for the members it reaches, and the
// finalizer let go of a team no member holds.
func (w *fleetWorld) pass() {
	s := w.st
	if s.Mark() == "" {
		return
	}
	// Root's status keeps each member's capacity, which a restarted plane
	// reads back.
	if root := w.nodes["root"]; root != nil {
		root.capacity = s.fleetCapacity()
	}
	for _, name := range slices.Sorted(maps.Keys(w.nodes)) {
		m := s.members[name]
		if m == nil || m.shape.role != v1beta1.RoleClusterQueue {
			continue
		}
		if !s.Guarded(name) && !m.deleting {
			w.flight = append(w.flight, flightWrite{node: name, nodeCond: m.version, guard: true})
		}
		if rec, ok := s.HoldRecord(name); ok {
			w.flight = append(w.flight, flightWrite{node: name, nodeCond: m.version, holds: rec.DeepCopy()})
		}
		if s.Releasable(name) {
			w.flight = append(w.flight, flightWrite{node: name, nodeCond: m.version, release: true})
		}
		plans := s.Plans(name)
		for _, c := range slices.Sorted(maps.Keys(plans)) {
			plan := plans[c]
			fw := flightWrite{member: c, node: name, cond: plan.Version, fence: plan.Fence, del: plan.Delete, budgets: map[Pair]Limits{}}
			for _, b := range plan.Budgets {
				fw.budgets[b.Pair] = Limits{b.Nominal, b.Borrow}
			}
			// The copier writes only what differs from the member's copy
			// as its watch holds it.
			cur := w.copies[c][name]
			if cur != nil && !fw.del && cur.version == fw.cond && (fw.fence == "" || cur.fence == fw.fence) && maps.Equal(cur.budgets, fw.budgets) {
				continue
			}
			if cur != nil && fw.budgets[holdPair].Nominal > cur.budgets[holdPair].Nominal {
				w.stats.raises++
				// Another member's raise of the same team still on its way.
				for _, o := range w.flight {
					if o.member != "" && o.member != c && o.node == name && w.copies[o.member][name] != nil &&
						o.budgets[holdPair].Nominal > w.copies[o.member][name].budgets[holdPair].Nominal {
						w.stats.contested++
						break
					}
				}
			} else if cur != nil && (fw.del || fw.budgets[holdPair].Nominal < cur.budgets[holdPair].Nominal) {
				w.stats.lowers++
			}
			w.flight = append(w.flight, fw)
		}
	}
}

// land lets write i arrive, if its link is up; it reports whether it left
// the flight (landed or refused).
func (w *fleetWorld) land(i int) bool {
	fw := w.flight[i]
	if fw.member != "" && !w.reach[fw.member] {
		return false
	}
	w.flight = slices.Delete(w.flight, i, i+1)
	if fw.member == "" {
		n := w.nodes[fw.node]
		if n == nil || n.version != fw.nodeCond {
			return true // a conflict: the shell tries again on its next pass
		}
		switch {
		case fw.guard:
			n.guarded = true
		case fw.release:
			if n.deleting {
				delete(w.nodes, fw.node)
				return true
			}
			n.guarded = false
		default:
			n.holds = fw.holds
		}
		n.version = w.nextRV()
		return true
	}
	cps := w.copies[fw.member]
	cur := cps[fw.node]
	switch {
	case fw.cond == "" && cur == nil:
		if !fw.del {
			cps[fw.node] = &worldCopy{version: strconv.FormatUint(w.nextRV(), 10), budgets: fw.budgets}
		}
	case cur != nil && fw.cond == cur.version:
		if fw.del {
			delete(cps, fw.node)
		} else {
			cur.version, cur.budgets = strconv.FormatUint(w.nextRV(), 10), fw.budgets
			if fw.fence != "" {
				cur.fence = fw.fence
			}
		}
	}
	return true
}

// mayHold is the most member m may come to hold of node's copy: what it
// holds, or what a write on its way that can still land would give it.
func (w *fleetWorld) mayHold(m, node string, p Pair) Limits {
	var out Limits
	cur := w.copies[m][node]
	if cur != nil {
		out = cur.budgets[p]
	}
	for _, fw := range w.flight {
		if fw.member != m || fw.node != node || fw.del {
			continue
		}
		if (cur == nil && fw.cond == "") || (cur != nil && fw.cond == cur.version) {
			out = out.max(fw.budgets[p])
		}
	}
	return out
}

// check holds the fleet's promise after a step: for each node with a
// budget, what the members may hold together grew only where it fits the
// budget (a budget lowered below what they hold is reached by lowering,
// never by raising).
func (w *fleetWorld) check(step string) {
	w.t.Helper()
	forgotten := map[string]bool{}
	for _, g := range w.gone {
		forgotten[g.Name] = true
	}
	// Every team, and every name a copy is held under.
	teams := map[string]bool{}
	for name, n := range w.nodes {
		if n.spec.Role == v1beta1.RoleClusterQueue {
			teams[name] = true
		}
	}
	for _, cps := range w.copies {
		for node := range cps {
			teams[node] = true
		}
	}
	held := map[string]Limits{}
	for team := range teams {
		var sum Limits
		for _, m := range w.members {
			if forgotten[m] {
				continue
			}
			l := w.mayHold(m, team, holdPair)
			sum.Nominal += l.Nominal
			sum.Borrow += l.Borrow
		}
		held[team] = sum
		// Up the plane's tree, as it stands.
		for cur, steps := w.nodes[team], 0; cur != nil && cur.spec.ParentRef != nil && steps < 20; steps++ {
			parent := cur.spec.ParentRef.Name
			h := held[parent]
			h.Nominal += sum.Nominal
			held[parent] = h
			cur = w.nodes[parent]
		}
	}
	for name, now := range held {
		var budget Limits
		if n := w.nodes[name]; n != nil && !n.deleting {
			for _, b := range n.spec.Budgets {
				if b.ResourceName == holdPair.Resource && b.ResourceFlavor == holdPair.Flavor {
					budget.Nominal = AmountOf(b.Nominal)
					if b.BorrowingLimit != nil {
						budget.Borrow = AmountOf(*b.BorrowingLimit)
					} else {
						budget.Borrow = -1 // no budget: not judged
					}
				}
			}
		}
		before := w.held[name]
		hasBudget := w.nodes[name] != nil && slices.ContainsFunc(w.nodes[name].spec.Budgets, func(b v1beta1.Budget) bool { return b.ResourceName == holdPair.Resource })
		if hasBudget && now.Nominal > before.Nominal && now.Nominal > budget.Nominal {
			w.t.Fatalf("%s: the members may hold %s of %s's %s (from %s), above its budget of %s\n%s", step, now.Nominal, name, holdPair, before.Nominal, budget.Nominal, w.dump())
		}
		if hasBudget && budget.Borrow >= 0 && now.Borrow > before.Borrow && now.Borrow > budget.Borrow {
			w.t.Fatalf("%s: the members may borrow %s for %s (from %s), above its borrowingLimit of %s\n%s", step, now.Borrow, name, before.Borrow, budget.Borrow, w.dump())
		}
	}
	w.held = held
}

func (w *fleetWorld) dump() string {
	var b strings.Builder
	for _, m := range w.members {
		fmt.Fprintf(&b, "  %s (reached %v, listed %v):", m, w.reach[m], w.listed[m])
		for _, node := range slices.Sorted(maps.Keys(w.copies[m])) {
			c := w.copies[m][node]
			fmt.Fprintf(&b, " %s=%s@%s", node, c.budgets[holdPair].Nominal, c.version)
		}
		b.WriteString("\n")
	}
	for _, fw := range w.flight {
		if fw.member != "" {
			fmt.Fprintf(&b, "  in flight to %s: %s=%s if %q (delete %v)\n", fw.member, fw.node, fw.budgets[holdPair].Nominal, fw.cond, fw.del)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.nodes)) {
		n := w.nodes[name]
		fmt.Fprintf(&b, "  node %s v%d holds %v\n", name, n.version, n.holds)
	}
	return b.String()
}

// settle runs the world until nothing moves: every link up, every write
// landed, every read delivered.
func (w *fleetWorld) settle() {
	for _, m := range w.members {
		w.report(m)
	}
	for round := 0; round < 40; round++ {
		w.pass()
		if len(w.flight) == 0 {
			return
		}
		for len(w.flight) > 0 {
			if !w.land(0) {
				w.flight = w.flight[1:] // a link still cut: the write is lost
			}
		}
		for _, name := range slices.Sorted(maps.Keys(w.nodes)) {
			w.inform(name)
		}
		for _, name := range slices.Sorted(maps.Keys(w.st.members)) {
			if w.nodes[name] == nil {
				w.inform(name)
			}
		}
		for _, m := range w.members {
			w.report(m)
		}
		w.check("settling")
	}
	w.t.Fatalf("the world does not settle: %d writes still on their way\n%s", len(w.flight), w.dump())
}

func explicitTeam(parent string, nominal Amount, shares map[string]Amount) v1beta1.AcceleratorQuotaSpec {
	b := v1beta1.Budget{ResourceName: holdPair.Resource, ResourceFlavor: holdPair.Flavor, Nominal: nominal.Quantity(), Policy: v1beta1.DistributionExplicit}
	for _, c := range slices.Sorted(maps.Keys(shares)) {
		b.PerCluster = append(b.PerCluster, v1beta1.ClusterShare{Cluster: c, Nominal: shares[c].Quantity()})
	}
	return v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: parent}, Budgets: []v1beta1.Budget{b}}
}

func gpuAmount(s string) Amount { return AmountOf(resource.MustParse(s)) }

// copyOn is what member m's copy of node holds of gpu@a100, "-" for no
// copy.
func (w *fleetWorld) copyOn(m, node string) string {
	c := w.copies[m][node]
	if c == nil {
		return "-"
	}
	return c.budgets[holdPair].Nominal.String()
}

// The case: fleet-a moves from east 5 / west 4 to east 6 / west 3
// while west does not answer. East stays at 5 until west's 3 is read back,
// then goes to 6; a raise that takes nothing from west goes at once.
func TestMoveWaitsForTheLowerToBeReadBack(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("5"), "west": gpuAmount("4")}))
	w.settle()
	if e, wst := w.copyOn("east", "fleet-a"), w.copyOn("west", "fleet-a"); e != "5" || wst != "4" {
		t.Fatalf("before the move, east holds %s and west %s, want 5 and 4\n%s", e, wst, w.dump())
	}

	w.reach["west"] = false
	w.report("west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("6"), "west": gpuAmount("3")}))
	for range 5 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("east")
		w.check("west cut off")
	}
	if got := w.copyOn("east", "fleet-a"); got != "5" {
		t.Fatalf("with west cut off, east holds %s, want 5: its raise waits for west's lower\n%s", got, w.dump())
	}
	waits := w.st.Waits("fleet-a")
	if wt, ok := waits["east"]; !ok || !strings.Contains(wt.Message, "west to release 1") || !strings.Contains(wt.Message, "does not answer") {
		t.Errorf("east's wait: %+v, want it to name west releasing 1 and not answering", waits)
	}
	if len(w.flight) == 0 {
		t.Error("no write to west waits in its link: the lower was never sent")
	}

	// West back: the lower lands, is read back, and only then east rises.
	w.reach["west"] = true
	w.settle()
	if e, wst := w.copyOn("east", "fleet-a"), w.copyOn("west", "fleet-a"); e != "6" || wst != "3" {
		t.Fatalf("after west answered, east holds %s and west %s, want 6 and 3\n%s", e, wst, w.dump())
	}
	if len(w.st.Waits("fleet-a")) != 0 {
		t.Errorf("waits left once the move is done: %+v", w.st.Waits("fleet-a"))
	}

	// A raise that takes nothing from another member goes at once, west
	// cut off or not.
	w.reach["west"] = false
	w.report("west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("10"), map[string]Amount{"east": gpuAmount("7"), "west": gpuAmount("3")}))
	for range 4 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("east")
		w.check("a raise beside a cut-off member")
	}
	if got := w.copyOn("east", "fleet-a"); got != "7" {
		t.Fatalf("a raise of east taking nothing from west: east holds %s, want 7\n%s", got, w.dump())
	}
}

// The same move with the leader gone in its middle: the new leader, which
// knows nothing of the old one's writes on their way, still keeps east at
// 5 until west's 3 is read back.
func TestMoveAcrossALeaderChange(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("5"), "west": gpuAmount("4")}))
	w.settle()
	w.reach["west"] = false
	w.report("west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("9"), map[string]Amount{"east": gpuAmount("6"), "west": gpuAmount("3")}))
	w.pass() // the old leader sends west's lower, which waits in the link
	w.restart()
	for range 5 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("east")
		w.check("after the leader changed")
	}
	if got := w.copyOn("east", "fleet-a"); got != "5" {
		t.Fatalf("after the leader changed with west cut off, east holds %s, want 5\n%s", got, w.dump())
	}
	w.reach["west"] = true
	w.settle()
	if e, wst := w.copyOn("east", "fleet-a"), w.copyOn("west", "fleet-a"); e != "6" || wst != "3" {
		t.Fatalf("after west answered, east holds %s and west %s, want 6 and 3\n%s", e, wst, w.dump())
	}
}

// TestFleetHoldsRandomized runs random worlds: budget moves and changes
// (Explicit and Proportional), members' marks, links cut and restored,
// writes delayed, lost or landing out of order, leaders replaced with
// writes on their way, members leaving and joining, teams deleted, and
// checks the fleet's promise after every step; then heals the world and
// checks that every copy reaches its share.
func TestFleetHoldsRandomized(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 40
	}
	if n, err := strconv.Atoi(os.Getenv("OME_FLEET_SEEDS")); err == nil && n > 0 {
		seeds = n // a longer soak: OME_FLEET_SEEDS=5000 go test ./state -run TestFleetHoldsRandomized
	}
	var sum holdStats
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			st := runRandomFleet(t, uint64(seed))
			sum.raises += st.raises
			sum.lowers += st.lowers
			sum.waits += st.waits
			sum.contested += st.contested
			sum.restartsInFlight += st.restartsInFlight
		})
	}
	t.Logf("over %d worlds: %d raises and %d lowers written, %d of the raises beside another member's raise on its way, %d steps with a raise waiting, %d leaders replaced with writes on their way",
		seeds, sum.raises, sum.lowers, sum.contested, sum.waits, sum.restartsInFlight)
}

func runRandomFleet(t *testing.T, seed uint64) holdStats {
	rng := rand.New(rand.NewPCG(seed, 47))
	w := newFleetWorld(t, "east", "north", "west")
	w.grace = 2 * time.Minute // a member that never reports holds the Proportional splits for two ticks
	w.restart()
	members := w.members
	amount := func(n int) Amount { return Amount(n) * 1000 }
	w.putNode("ml", v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"},
		Budgets: []v1beta1.Budget{{ResourceName: holdPair.Resource, ResourceFlavor: holdPair.Flavor, Nominal: amount(20).Quantity()}}})
	teams := []string{"a", "b", "c"}
	totals := map[string]int{}
	// randomSpec is most often a move: the team's total stays, its shares
	// go elsewhere (tight budgets make raises wait for lowers); else a new
	// total, or a Proportional split over the members' marks.
	randomSpec := func(team string, keep bool) v1beta1.AcceleratorQuotaSpec {
		if _, ok := totals[team]; !ok || (!keep && rng.IntN(5) == 0) {
			totals[team] = 2 + rng.IntN(5)
		}
		total := totals[team]
		var bl *resource.Quantity
		if rng.IntN(2) == 0 {
			q := amount(rng.IntN(4)).Quantity()
			bl = &q
		}
		if rng.IntN(5) == 0 {
			spec := explicitTeam("ml", amount(total), nil)
			spec.Budgets[0].Policy = v1beta1.DistributionProportional
			spec.Budgets[0].BorrowingLimit = bl
			return spec
		}
		shares := map[string]Amount{}
		left := total
		for i, m := range members {
			n := rng.IntN(left + 1)
			if i == len(members)-1 {
				n = left
			}
			if n > 0 {
				shares[m] = amount(n)
			}
			left -= n
		}
		spec := explicitTeam("ml", amount(total), shares)
		spec.Budgets[0].BorrowingLimit = bl
		return spec
	}
	prev := map[string]v1beta1.AcceleratorQuotaSpec{}
	put := func(team string, spec v1beta1.AcceleratorQuotaSpec) {
		if n := w.nodes[team]; n != nil {
			prev[team] = n.spec
		}
		w.putNode(team, spec)
	}
	for _, team := range teams {
		put(team, randomSpec(team, false))
	}
	// The Cohort's budget is what its teams add up to: a team rises only
	// as far as another falls (transfers below).
	sumTotals := func() (n int) {
		for _, team := range teams {
			if node := w.nodes[team]; node != nil && !node.deleting {
				n += int(AmountOf(node.spec.Budgets[0].Nominal) / 1000)
			}
		}
		return n
	}
	w.putNode("ml", v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"},
		Budgets: []v1beta1.Budget{{ResourceName: holdPair.Resource, ResourceFlavor: holdPair.Flavor, Nominal: amount(max(sumTotals(), 20)).Quantity()}}})
	w.settle()
	w.putNode("ml", v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"},
		Budgets: []v1beta1.Budget{{ResourceName: holdPair.Resource, ResourceFlavor: holdPair.Flavor, Nominal: amount(sumTotals()).Quantity()}}})
	w.settle()
	for step := range 400 {
		what := ""
		switch r := rng.IntN(100); {
		case r < 10:
			team := teams[rng.IntN(len(teams))]
			if n := w.nodes[team]; n != nil && !n.deleting {
				put(team, randomSpec(team, false))
				what = "a budget of " + team + " changed"
			}
		case r < 16:
			// A transfer between two teams, the lowering written first, as
			// the webhook would have it.
			from, to := teams[rng.IntN(len(teams))], teams[rng.IntN(len(teams))]
			nf, nt := w.nodes[from], w.nodes[to]
			if from == to || nf == nil || nt == nil || nf.deleting || nt.deleting {
				break
			}
			k := 1 + rng.IntN(2)
			if totals[from] < k {
				break
			}
			totals[from] -= k
			put(from, randomSpec(from, true))
			totals[to] += k
			put(to, randomSpec(to, true))
			what = fmt.Sprintf("%d moved from %s to %s", k, from, to)
		case r < 20:
			team := teams[rng.IntN(len(teams))]
			if n, p := w.nodes[team], prev[team]; n != nil && !n.deleting && p.Role != "" {
				put(team, p)
				what = "a change of " + team + " undone"
			}
		case r < 36:
			w.pass()
			what = "the leader's pass"
		case r < 58:
			if len(w.flight) > 0 {
				// Most often the newest write lands first, so that older
				// ones linger on their way.
				i := len(w.flight) - 1 - rng.IntN(min(3, len(w.flight)))
				if rng.IntN(4) == 0 {
					i = rng.IntN(len(w.flight))
				}
				fw := w.flight[i]
				w.land(i)
				if fw.member == "" && w.nodes[fw.node] != nil && rng.IntN(3) > 0 {
					w.inform(fw.node) // the plane's informer is quick
				}
				what = "a write landed"
			}
		case r < 60:
			if len(w.flight) > 0 {
				i := rng.IntN(len(w.flight))
				w.flight = slices.Delete(w.flight, i, i+1)
				what = "a write was lost"
			}
		case r < 72:
			m := members[rng.IntN(len(members))]
			w.report(m)
			what = "a report of " + m
		case r < 78:
			name := slices.Sorted(maps.Keys(w.nodes))[rng.IntN(len(w.nodes))]
			w.inform(name)
			what = "the plane's informer read " + name
		case r < 84:
			m := members[rng.IntN(len(members))]
			w.reach[m] = !w.reach[m]
			w.report(m)
			what = fmt.Sprintf("%s reachable: %v", m, w.reach[m])
		case r < 87:
			m := members[rng.IntN(len(members))]
			w.marks[m] = amount(10 + rng.IntN(30))
			w.report(m)
			what = "the mark of " + m + " moved"
		case r < 91:
			if len(w.flight) > 0 {
				w.stats.restartsInFlight++
			}
			w.restart()
			what = "a new leader"
		case r < 93:
			m := members[rng.IntN(len(members))]
			w.listed[m] = !w.listed[m]
			w.apply(events.MembershipChanged(w.now, m, events.Membership{Member: w.listed[m], Source: "test"}))
			w.report(m)
			what = fmt.Sprintf("%s listed: %v", m, w.listed[m])
		case r < 95:
			team := teams[rng.IntN(len(teams))]
			if n := w.nodes[team]; n != nil && !n.deleting {
				if n.guarded {
					n.deleting, n.version = true, w.nextRV()
					w.inform(team)
				} else {
					delete(w.nodes, team)
					w.inform(team)
				}
				what = team + " deleted"
			} else if n == nil {
				put(team, randomSpec(team, false))
				what = team + " created again"
			}
		default:
			w.now = w.now.Add(time.Minute)
			w.apply(events.Tick(w.now))
			what = "a tick"
		}
		if what != "" {
			w.check(fmt.Sprintf("seed %d, step %d (%s)", seed, step, what))
			for _, team := range teams {
				if len(w.st.Waits(team)) > 0 {
					w.stats.waits++
				}
			}
		}
	}
	// Heal: every member listed and reached, the leader passes until the
	// world settles; every copy then holds its share.
	for _, m := range members {
		if !w.listed[m] {
			w.listed[m] = true
			w.apply(events.MembershipChanged(w.now, m, events.Membership{Member: true, Source: "test"}))
		}
		w.reach[m] = true
	}
	w.settle()
	w.settle()
	for _, team := range teams {
		splits := w.st.Splits(team)
		for _, m := range members {
			var want Amount
			for _, sp := range splits {
				for _, sh := range sp.Shares {
					if sh.Cluster == m {
						want = sh.Amount
					}
				}
			}
			got := AmountOf(resource.MustParse("0"))
			if c := w.copies[m][team]; c != nil {
				got = c.budgets[holdPair].Nominal
			}
			st, _ := w.st.NodeStatus(team)
			if n := w.nodes[team]; st.Phase == PhaseReady && n != nil && !n.deleting && got != want {
				t.Fatalf("seed %d: healed, %s holds %s of %s, its share is %s (waits: %+v, plans: %+v)\n%s", seed, m, got, team, want, w.st.Waits(team), w.st.Plans(team), w.dump())
			}
		}
	}
	for _, team := range teams {
		if n := w.nodes[team]; n != nil && n.deleting {
			t.Fatalf("seed %d: healed, %s is still being deleted: its finalizer was not let go (releasable %v)\n%s", seed, team, w.st.Releasable(team), w.dump())
		}
	}
	return w.stats
}

// A move reversed while its raise is still on its way: the raise counts as
// held until the copy is read again, so the reverse move's raise waits.
func TestRaiseOnItsWayCounts(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("3"), "west": gpuAmount("3")}))
	w.settle()
	// east 3 -> 5, west 3 -> 1: west's lower lands and is read, east's
	// raise is sent and stays on its way.
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("5"), "west": gpuAmount("1")}))
	for range 6 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if w.flight[i].member == "east" && w.flight[i].budgets[holdPair].Nominal > gpuAmount("3") {
				continue // east's raise lingers
			}
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("east")
		w.report("west")
		w.check("east's raise on its way")
	}
	if got := w.mayHold("east", "fleet-a", holdPair).Nominal; got != gpuAmount("5") {
		t.Fatalf("east's raise to 5 is not on its way (east may hold %s)\n%s", got, w.dump())
	}
	// The move reversed: west must wait for east, whose raise may still
	// land.
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("1"), "west": gpuAmount("5")}))
	for range 4 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if w.flight[i].member == "east" {
				continue // nothing reaches east for now
			}
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("west")
		w.check("the move reversed")
	}
	if got := w.copyOn("west", "fleet-a"); got != "1" {
		t.Fatalf("west rose to %s while east's raise to 5 was still on its way\n%s", got, w.dump())
	}
	w.settle()
	if e, wst := w.copyOn("east", "fleet-a"), w.copyOn("west", "fleet-a"); e != "1" || wst != "5" {
		t.Fatalf("settled, east holds %s and west %s, want 1 and 5\n%s", e, wst, w.dump())
	}
}

// A new leader takes an older leader's record as a bound on the copies as
// they are read now: a raise the old leader let through may still land on
// them until they are written again.
func TestNewLeaderInheritsTheRecord(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("3"), "west": gpuAmount("3")}))
	w.settle()
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("5"), "west": gpuAmount("1")}))
	lingers := func(fw flightWrite) bool { return fw.member == "east" }
	for range 6 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if !lingers(w.flight[i]) {
				w.land(i)
			}
		}
		w.inform("fleet-a")
		w.report("east")
		w.report("west")
	}
	if got := w.mayHold("east", "fleet-a", holdPair).Nominal; got != gpuAmount("5") {
		t.Fatalf("the old leader's raise of east to 5 is not on its way (east may hold %s)\n%s", got, w.dump())
	}
	// A new leader, and the move reversed; east's copy is not written
	// again for now.
	w.restart()
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("1"), "west": gpuAmount("5")}))
	for range 6 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if !lingers(w.flight[i]) {
				w.land(i)
			}
		}
		w.inform("fleet-a")
		w.report("east")
		w.report("west")
		w.check("a new leader, east's old raise on its way")
	}
	if got := w.copyOn("west", "fleet-a"); got != "1" {
		t.Fatalf("west rose to %s while the old leader's raise of east was still on its way\n%s", got, w.dump())
	}
	w.settle()
	if e, wst := w.copyOn("east", "fleet-a"), w.copyOn("west", "fleet-a"); e != "1" || wst != "5" {
		t.Fatalf("settled, east holds %s and west %s, want 1 and 5\n%s", e, wst, w.dump())
	}
}

// A raise under a Cohort's budget needs every team under it to carry this
// leader's record: the record it read of a sibling may be older than one
// an earlier leader wrote, and acted on.
func TestSiblingRecordsMustBeCurrent(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	cohort := func(n string) v1beta1.AcceleratorQuotaSpec {
		return v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: "root"},
			Budgets: []v1beta1.Budget{{ResourceName: holdPair.Resource, ResourceFlavor: holdPair.Flavor, Nominal: gpuAmount(n).Quantity()}}}
	}
	w.putNode("ml", cohort("8"))
	w.putNode("a", explicitTeam("ml", gpuAmount("4"), map[string]Amount{"east": gpuAmount("4")}))
	w.putNode("b", explicitTeam("ml", gpuAmount("4"), map[string]Amount{"west": gpuAmount("4")}))
	w.settle()
	// A new leader whose view of a is old: it has not yet read the record
	// that says a may hold more on east. The world is then changed behind
	// its back, as an earlier leader did: a's record says 6 on east.
	w.restart()
	w.nodes["a"].holds = &v1beta1.FleetHolds{Writer: "1/n0", Clusters: []v1beta1.ClusterHolds{{Cluster: "east",
		Budgets: []v1beta1.HeldBudget{{ResourceName: holdPair.Resource, ResourceFlavor: holdPair.Flavor, Nominal: gpuAmount("6").Quantity()}}}}}
	w.nodes["a"].version = w.nextRV()
	w.flight = append(w.flight, flightWrite{member: "east", node: "a", cond: w.copies["east"]["a"].version,
		budgets: map[Pair]Limits{holdPair: {Nominal: gpuAmount("6")}}})
	w.held = map[string]Limits{"a": {Nominal: gpuAmount("6")}, "ml": {Nominal: gpuAmount("10")}}
	// The Cohort grows by 2 and b with it: room, as this leader reads a.
	w.putNode("ml", cohort("10"))
	w.putNode("b", explicitTeam("ml", gpuAmount("6"), map[string]Amount{"west": gpuAmount("6")}))
	for range 4 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if w.flight[i].member != "east" {
				w.land(i)
			}
		}
		w.inform("b")
		w.inform("ml")
		w.report("west")
		if got := w.copyOn("west", "b"); got != "4" {
			t.Fatalf("b rose to %s on west while a's record, written by an earlier leader, was not yet read\n%s", got, w.dump())
		}
	}
}

// A raise goes to a member only once the team's record that counts it has
// landed on the plane: a new leader reads its bound there.
func TestRaiseWaitsForItsRecord(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("6"), map[string]Amount{"east": gpuAmount("3"), "west": gpuAmount("3")}))
	w.settle()
	// The budget grows: east's raise takes nothing from west.
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("8"), map[string]Amount{"east": gpuAmount("5"), "west": gpuAmount("3")}))
	for range 6 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			if w.flight[i].member != "" {
				w.land(i) // the plane's own writes do not land for now
			}
		}
		w.report("east")
		w.report("west")
		if got := w.mayHold("east", "fleet-a", holdPair).Nominal; got > gpuAmount("3") {
			t.Fatalf("east may hold %s before the record counting its raise landed\n%s", got, w.dump())
		}
	}
	w.settle()
	if got := w.copyOn("east", "fleet-a"); got != "5" {
		t.Fatalf("settled, east holds %s, want 5\n%s", got, w.dump())
	}
}

// A member that never reports holds the Proportional splits until its
// grace ends (a tick tells the time), then the others are split without
// it, and it rejoins the split once it reports.
func TestGraceSplitsOutASilentMember(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	w.grace = 5 * time.Minute
	w.restart()
	w.apply(events.MembershipChanged(w.now, "ghost", events.Membership{Member: true, Source: "test"}))
	spec := explicitTeam("root", gpuAmount("6"), nil)
	spec.Budgets[0].Policy = v1beta1.DistributionProportional
	w.putNode("fleet-p", spec)
	w.settle()
	if st, _ := w.st.NodeStatus("fleet-p"); st.Phase != PhaseSplitInvalid || !strings.Contains(st.Message, "ghost has not reported") {
		t.Fatalf("within ghost's grace, fleet-p: %s %s, want SplitInvalid naming ghost", st.Phase, st.Message)
	}
	w.now = w.now.Add(4 * time.Minute)
	w.apply(events.Tick(w.now))
	if st, _ := w.st.NodeStatus("fleet-p"); st.Phase != PhaseSplitInvalid {
		t.Fatalf("4 minutes into a 5-minute grace, fleet-p: %s, want it still held", st.Phase)
	}
	w.now = w.now.Add(time.Minute)
	w.apply(events.Tick(w.now))
	w.settle()
	if e, wst := w.copyOn("east", "fleet-p"), w.copyOn("west", "fleet-p"); e != "3" || wst != "3" {
		t.Fatalf("after ghost's grace, east holds %s and west %s of fleet-p, want 3 and 3\n%s", e, wst, w.dump())
	}
	// ghost reports, with as much as east and west: it rejoins the split,
	// and gets its share once theirs are lowered and read back.
	w.members = append(w.members, "ghost")
	w.listed["ghost"], w.reach["ghost"], w.marks["ghost"] = true, true, 40000
	w.copies["ghost"] = map[string]*worldCopy{}
	w.settle()
	for _, m := range []string{"east", "west", "ghost"} {
		if got := w.copyOn(m, "fleet-p"); got != "2" {
			t.Fatalf("once ghost reported, %s holds %s of fleet-p, want 2\n%s", m, got, w.dump())
		}
	}
}

// A member that leaves the fleet holding copies keeps counting until the
// plane has deleted them and read them gone; then its share goes to the
// others.
func TestLeaverCountsUntilReadGone(t *testing.T) {
	w := newFleetWorld(t, "east", "west")
	spec := explicitTeam("root", gpuAmount("8"), map[string]Amount{"east": gpuAmount("4"), "west": gpuAmount("4")})
	w.putNode("fleet-a", spec)
	w.settle()
	// west leaves the inventory while the plane cannot reach it.
	w.reach["west"] = false
	w.report("west")
	w.listed["west"] = false
	w.apply(events.MembershipChanged(w.now, "west", events.Membership{Source: "test", Message: "deleted"}))
	w.putNode("fleet-a", explicitTeam("root", gpuAmount("8"), map[string]Amount{"east": gpuAmount("8")}))
	for range 4 {
		w.pass()
		for i := len(w.flight) - 1; i >= 0; i-- {
			w.land(i)
		}
		w.inform("fleet-a")
		w.report("east")
		w.check("west left, unreachable")
	}
	if got := w.copyOn("east", "fleet-a"); got != "4" {
		t.Fatalf("east rose to %s while west, which left, may still hold 4\n%s", got, w.dump())
	}
	// west answers: its copy is deleted, read gone, and east rises.
	w.reach["west"] = true
	w.settle()
	if e, wst := w.copyOn("east", "fleet-a"), w.copyOn("west", "fleet-a"); e != "8" || wst != "-" {
		t.Fatalf("once west's copy is gone, east holds %s and west %s, want 8 and none\n%s", e, wst, w.dump())
	}
}
