package state

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"ome.io/quota-manager/events"
)

// unit is one device, in milli-units.
const unit Amount = 1000

// Selector is a compiled CEL device selector. Compiling is deterministic,
// and so is evaluating a compiled program: the reducer evaluates selectors
// itself, so that a replay re-decides which devices a class selects.
type Selector struct {
	expr string
	res  dracel.CompilationResult
}

// CompileSelector compiles a DRA CEL selector expression, as the API server
// and the scheduler do. The error says what is wrong with it.
func CompileSelector(expr string) (*Selector, error) {
	res := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
	if res.Error != nil {
		return nil, fmt.Errorf("CEL selector %q does not compile: %s", expr, res.Error.Detail)
	}
	return &Selector{expr: expr, res: res}, nil
}

// compile is CompileSelector through the state's memo of the selectors its
// DeviceClasses and mappings hold: the mappings are computed again on every
// DeviceClass change, and their expressions need not be compiled again.
// draRebuild drops what nothing holds any more, so the memo is as large as
// the selectors in use.
func (s *State) compile(expr string) (*Selector, error) {
	sel := s.dra.selectors[expr]
	if sel == nil {
		var err error
		if sel, err = CompileSelector(expr); err != nil {
			return nil, err
		}
		s.dra.selectors[expr] = sel
	}
	return sel, nil
}

// pruneSelectors drops from the memo the selectors that no DeviceClass and
// no mapping holds.
func (d *draState) pruneSelectors() {
	held := map[*Selector]bool{}
	for _, c := range d.classes {
		for _, sel := range c.sels {
			held[sel] = true
		}
	}
	for _, m := range d.mappings {
		for _, cs := range m.counters {
			if cs.sel != nil {
				held[cs.sel] = true
			}
		}
	}
	maps.DeleteFunc(d.selectors, func(_ string, sel *Selector) bool { return !held[sel] })
}

// accepts evaluates the selector on a device. An evaluation error (an
// attribute the device lacks, the cost limit) is an error, as it is for the
// scheduler, and the device is not selected.
func (sel *Selector) accepts(dev *dracel.Device) (bool, error) {
	ok, _, err := sel.res.DeviceMatches(context.Background(), *dev)
	return ok, err
}

// draClass is a DeviceClass: its compiled selectors, or why one does not
// compile (then it selects nothing).
type draClass struct {
	spec *events.DeviceClass
	sels []*Selector
	err  string
}

type poolKey struct{ driver, pool string }

func (k poolKey) String() string { return k.driver + "/" + k.pool }

// draPool is a DRA resource pool: its slices, and what it contributes now.
type draPool struct {
	slices  map[string]*events.ResourceSlice
	contrib poolContrib
}

// poolContrib is what a complete pool contributes: amounts per node and
// logical name for node-local devices, contributions of devices reachable
// from several nodes, devices per unmapped DeviceClass, and the devices a
// selector failed on.
type poolContrib struct {
	complete   bool
	local      map[string]map[string]Amount
	global     []globalContrib
	unbudgeted map[string]int64
	errors     int
}

// globalContrib is what the devices of one slice (or one device, with
// per-device node selection) reachable from several nodes contribute.
type globalContrib struct {
	key     string // slice, or slice/device
	access  events.Access
	amounts map[string]Amount
	flavors []string // those it counts toward, as of its last contribution
}

// mapping is an effective mapping: a logical name, the DeviceClasses it
// counts and, for counter capacity, its counter sources.
type mapping struct {
	name     string
	classes  map[string]bool
	counters []counterSource
}

type counterSource struct {
	events.CounterSource
	sel *Selector // nil: every device of the driver
	err string
}

// draState is everything DRA capacity keeps.
type draState struct {
	classes  map[string]*draClass
	slices   map[string]*events.ResourceSlice
	pools    map[poolKey]*draPool
	mappings []*mapping                   // effective, by name
	byClass  map[string][]int             // DeviceClass -> indexes into mappings
	names    []string                     // logical names, sorted
	res      []string                     // measured resources and logical names, sorted
	nodes    map[string]map[string]listed // node -> logical name -> node-local amount
	strays   map[string]map[string]Amount // node or slice -> logical name -> unattributed amount
	unbudget map[string]int64             // unmapped DeviceClass -> devices
	errors   int                          // devices a selector failed on
	// selectors is the memo of compiled selectors by expression (compile).
	selectors map[string]*Selector
}

func newDRAState() draState {
	return draState{
		classes: map[string]*draClass{}, slices: map[string]*events.ResourceSlice{}, pools: map[poolKey]*draPool{},
		byClass: map[string][]int{}, nodes: map[string]map[string]listed{}, strays: map[string]map[string]Amount{},
		unbudget: map[string]int64{}, selectors: map[string]*Selector{},
	}
}

func (d *draState) clone() draState {
	c := *d
	c.classes = maps.Clone(d.classes) // classes are replaced, never modified
	c.slices = maps.Clone(d.slices)
	c.pools = make(map[poolKey]*draPool, len(d.pools))
	for k, p := range d.pools {
		cp := &draPool{slices: maps.Clone(p.slices), contrib: p.contrib}
		cp.contrib.global = slices.Clone(p.contrib.global) // flavors are replaced, never modified
		c.pools[k] = cp
	}
	c.nodes = maps.Clone(d.nodes) // inner maps are replaced, never modified
	c.strays = make(map[string]map[string]Amount, len(d.strays))
	for k, v := range d.strays {
		c.strays[k] = maps.Clone(v)
	}
	c.unbudget = maps.Clone(d.unbudget)
	c.selectors = maps.Clone(d.selectors) // a compiled selector is never modified
	return c
}

// resources are the measured resources and the DRA logical names, sorted:
// the resources root has capacity entries for.
func (s *State) resources() []string {
	if s.dra.res == nil {
		return s.cfg.MeasuredResources
	}
	return s.dra.res
}

// setMappings computes the effective mappings from the configuration and
// the DeviceClasses: explicit mappings, and each DeviceClass with an
// extendedResourceName that no explicit mapping names, under that name.
func (s *State) setMappings() {
	d := &s.dra
	byName := map[string]*mapping{}
	explicit := map[string]bool{}
	for _, m := range s.cfg.DeviceClassMappings {
		em := &mapping{name: m.Name, classes: map[string]bool{}}
		for _, c := range m.DeviceClassNames {
			em.classes[c] = true
			explicit[c] = true
		}
		for _, src := range m.Sources {
			if src.Counter == nil {
				continue
			}
			cs := counterSource{CounterSource: *src.Counter}
			if expr := src.Counter.Expression(); expr != "" {
				sel, err := s.compile(expr)
				if err != nil {
					cs.err = err.Error()
				}
				cs.sel = sel
			}
			em.counters = append(em.counters, cs)
		}
		byName[m.Name] = em
	}
	for _, name := range sortedKeys(d.classes) {
		ext := d.classes[name].spec.ExtendedResourceName
		if ext == "" || explicit[name] {
			continue
		}
		if byName[ext] == nil {
			byName[ext] = &mapping{name: ext, classes: map[string]bool{}}
		}
		byName[ext].classes[name] = true
	}
	d.names = sortedKeys(byName)
	d.mappings = d.mappings[:0:0]
	d.byClass = map[string][]int{}
	for i, name := range d.names {
		m := byName[name]
		d.mappings = append(d.mappings, m)
		for _, c := range sortedKeys(m.classes) {
			d.byClass[c] = append(d.byClass[c], i)
		}
	}
	if len(d.names) == 0 {
		d.res = nil
		return
	}
	d.res = slices.Clone(s.cfg.MeasuredResources)
	d.res = append(d.res, d.names...)
	slices.Sort(d.res)
	d.res = slices.Compact(d.res)
}

// setClass creates, changes (spec) or deletes (nil) a DeviceClass. It
// re-evaluates every device: O(devices), as a ResourceFlavor event costs
// O(nodes).
func (s *State) setClass(name string, spec *events.DeviceClass) {
	if spec == nil {
		if s.dra.classes[name] == nil {
			return
		}
		delete(s.dra.classes, name)
	} else {
		c := &draClass{spec: spec}
		for _, expr := range spec.Selectors {
			sel, err := s.compile(expr)
			if err != nil {
				c.err, c.sels = err.Error(), nil
				break
			}
			c.sels = append(c.sels, sel)
		}
		s.dra.classes[name] = c
	}
	s.draRebuild()
	if s.synced {
		s.measure()
	}
}

// setSlice creates, changes (sl) or deletes (nil) a ResourceSlice: its
// pool's contribution is computed again, O(devices in the pool).
func (s *State) setSlice(name string, sl *events.ResourceSlice) {
	d := &s.dra
	var touched []poolKey
	if old := d.slices[name]; old != nil {
		k := poolKey{old.Driver, old.Pool}
		delete(d.pools[k].slices, name)
		touched = append(touched, k)
		delete(d.slices, name)
	} else if sl == nil {
		return
	}
	if sl != nil {
		k := poolKey{sl.Driver, sl.Pool}
		p := d.pools[k]
		if p == nil {
			p = &draPool{slices: map[string]*events.ResourceSlice{}}
			d.pools[k] = p
		}
		p.slices[name] = sl
		d.slices[name] = sl
		if len(touched) == 0 || touched[0] != k {
			touched = append(touched, k)
		}
	}
	for _, k := range touched {
		p := d.pools[k]
		s.applyPool(p, s.computePool(p))
		if len(p.slices) == 0 {
			delete(d.pools, k)
		}
	}
	if s.synced {
		s.measure()
	}
}

// draRebuild computes every pool's contribution again and recounts: after
// a change of DeviceClasses or mappings.
func (s *State) draRebuild() {
	d := &s.dra
	s.setMappings()
	d.pruneSelectors()
	clear(d.nodes)
	clear(d.unbudget)
	d.errors = 0
	for _, k := range slices.SortedFunc(maps.Keys(d.pools), comparePools) {
		p := d.pools[k]
		p.contrib = s.computePool(p)
		for node, amts := range p.contrib.local {
			d.nodes[node] = addListed(d.nodes[node], amts, +1)
		}
		addCounts(d.unbudget, p.contrib.unbudgeted, +1)
		d.errors += p.contrib.errors
	}
	s.recount()
}

func comparePools(a, b poolKey) int {
	if c := strings.Compare(a.driver, b.driver); c != 0 {
		return c
	}
	return strings.Compare(a.pool, b.pool)
}

// listed is a node's amount of a logical name, summed over the pools
// that list the name on the node (even at 0), and how many do.
type listed struct {
	amount Amount
	pools  int
}

// addListed returns a new map: m plus (sign +1) or minus (-1) one pool's
// amounts. A name no pool lists any more goes away.
func addListed(m map[string]listed, add map[string]Amount, sign int) map[string]listed {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]listed{}
	}
	for r, a := range add {
		e := out[r]
		e.amount += Amount(sign) * a
		e.pools += sign
		if e.pools == 0 {
			delete(out, r)
		} else {
			out[r] = e
		}
	}
	return out
}

func addCounts(m, add map[string]int64, sign int64) {
	for c, n := range add {
		m[c] += sign * n
		if m[c] == 0 {
			delete(m, c)
		}
	}
}

// applyPool replaces a pool's contribution: the nodes it touches are
// taken out of the tallies and put back with the new amounts.
func (s *State) applyPool(p *draPool, next poolContrib) {
	d := &s.dra
	old := p.contrib
	touched := map[string]bool{}
	for n := range old.local {
		touched[n] = true
	}
	for n := range next.local {
		touched[n] = true
	}
	for n := range touched {
		s.draNodeContribute(n, -1)
	}
	for i := range old.global {
		s.draGlobalContribute(&old.global[i], -1)
	}
	for n := range touched {
		amts := addListed(addListed(d.nodes[n], old.local[n], -1), next.local[n], +1)
		if len(amts) == 0 {
			delete(d.nodes, n)
		} else {
			d.nodes[n] = amts
		}
	}
	addCounts(d.unbudget, old.unbudgeted, -1)
	addCounts(d.unbudget, next.unbudgeted, +1)
	d.errors += next.errors - old.errors
	p.contrib = next
	for n := range touched {
		s.draNodeContribute(n, +1)
	}
	for i := range next.global {
		p.contrib.global[i].flavors = s.globalFlavors(next.global[i].access)
		s.draGlobalContribute(&p.contrib.global[i], +1)
	}
}

// draNodeContribute adds (+1) or removes (-1) the DRA devices of a node to
// the tally of the flavor the node counts toward (attribute). The double-count rule: for
// a logical name that is also a measured resource of the Node's status,
// the node counts the larger of its status figure and its DRA devices, so
// a GPU published both ways counts once. Devices on a node with no Node
// object, or on one matching no flavor, are unattributed.
func (s *State) draNodeContribute(node string, sign Amount) {
	amts := s.dra.nodes[node]
	if len(amts) == 0 {
		return
	}
	m := s.hosts[node]
	for r, e := range amts {
		a := e.amount
		if m == nil || m.flavor == "" {
			s.draStray(node, r, sign*a)
			continue
		}
		var nodeCap, nodeAlloc Amount
		if _, measured := slices.BinarySearch(s.cfg.MeasuredResources, r); measured {
			nodeCap, _ = m.capacity(r)
			nodeAlloc, _ = m.allocatable(r)
		}
		installed := max(0, a-nodeCap)
		var alloc Amount
		t := s.tallies[Pair{r, m.flavor}]
		if m.counts() {
			alloc = max(0, a-nodeAlloc)
		} else {
			t.unavailable += sign * installed
		}
		t.installed += sign * installed
		t.allocatable += sign * alloc
		t.carriers += int(sign)
	}
}

func (s *State) draStray(holder, r string, a Amount) {
	m := s.dra.strays[holder]
	if m == nil {
		m = map[string]Amount{}
		s.dra.strays[holder] = m
	}
	m[r] += a
	if m[r] == 0 {
		delete(m, r)
		if len(m) == 0 {
			delete(s.dra.strays, holder)
		}
	}
}

// draGlobalContribute adds or removes the devices of a slice reachable
// from several nodes, toward the flavors of its last computed flavors.
func (s *State) draGlobalContribute(g *globalContrib, sign Amount) {
	for r, a := range g.amounts {
		if len(g.flavors) == 0 {
			s.draStray(g.key, r, sign*a)
			continue
		}
		for _, f := range g.flavors {
			t := s.tallies[Pair{r, f}]
			t.installed += sign * a
			t.allocatable += sign * a
			t.carriers += int(sign)
		}
	}
}

// globalFlavors are the flavors that devices reachable from several nodes
// count toward: with allNodes, the flavors without nodeLabels (they match
// every node); with a nodeSelector, the flavors whose every nodeLabel each
// of the selector's terms requires (a matchExpression key In [value]), so
// that every node the slice reaches is in the flavor. Otherwise none: the
// devices are unattributed.
func (s *State) globalFlavors(a events.Access) []string {
	var out []string
	for _, f := range sortedKeys(s.flavors) {
		want := s.flavors[f]
		switch {
		case len(want) == 0:
			out = append(out, f)
		case a.NodeSelector != nil && len(a.NodeSelector.NodeSelectorTerms) > 0 && !a.AllNodes:
			all := true
			for _, term := range a.NodeSelector.NodeSelectorTerms {
				for k, v := range want {
					if !slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
						return e.Key == k && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == v
					}) {
						all = false
					}
				}
			}
			if all {
				out = append(out, f)
			}
		}
	}
	return out
}

// rematchGlobals moves the contributions of devices reachable from several
// nodes after a flavor changed: O(such slices).
func (s *State) rematchGlobals() {
	for _, p := range s.dra.pools {
		for i := range p.contrib.global {
			g := &p.contrib.global[i]
			next := s.globalFlavors(g.access)
			if slices.Equal(next, g.flavors) {
				continue
			}
			s.draGlobalContribute(g, -1)
			g.flavors = next
			s.draGlobalContribute(g, +1)
		}
	}
}

// recountDRA puts the DRA contributions back after the tallies were
// cleared (recount).
func (s *State) recountDRA() {
	clear(s.dra.strays)
	for n := range s.dra.nodes {
		s.draNodeContribute(n, +1)
	}
	for _, p := range s.dra.pools {
		for i := range p.contrib.global {
			g := &p.contrib.global[i]
			g.flavors = s.globalFlavors(g.access)
			s.draGlobalContribute(g, +1)
		}
	}
}

// complete reports whether a pool's slices are all present: those of its
// newest generation number resourceSliceCount. Until then the pool counts
// nothing, as the scheduler does not allocate from it.
func (p *draPool) current() ([]*events.ResourceSlice, bool) {
	var gen int64
	for _, sl := range p.slices {
		gen = max(gen, sl.Generation)
	}
	var cur []*events.ResourceSlice
	for _, name := range sortedKeys(p.slices) {
		if sl := p.slices[name]; sl.Generation == gen {
			cur = append(cur, sl)
		}
	}
	for _, sl := range cur {
		if sl.SliceCount != int64(len(cur)) {
			return cur, false
		}
	}
	return cur, len(cur) > 0
}

// computePool is what a pool contributes: each device of a complete pool is
// run through every DeviceClass's selectors; it counts 1 toward each
// logical name one of its classes is mapped to, or, for a mapping with
// counter sources, makes the counter sets it consumes count (each set once
// per mapping, however many devices consume it); it counts toward each
// unmapped class that selects it as unbudgeted. O(devices x selectors).
func (s *State) computePool(p *draPool) poolContrib {
	d := &s.dra
	cur, complete := p.current()
	out := poolContrib{complete: complete}
	if !complete {
		return out
	}
	sets := map[string]map[string]resourcev1.Counter{}
	for _, sl := range cur {
		for _, cs := range sl.SharedCounters {
			sets[cs.Name] = cs.Counters
		}
	}
	classNames := sortedKeys(d.classes)
	counted := map[string]bool{} // mapping / source / counter set
	add := func(sl *events.ResourceSlice, dev *events.Device, r string, a Amount) {
		acc := sl.Access
		key := sl.Name
		if sl.Access.PerDevice && dev.Access != nil {
			acc, key = *dev.Access, sl.Name+"/"+dev.Name
		}
		if acc.NodeName != "" {
			if out.local == nil {
				out.local = map[string]map[string]Amount{}
			}
			if out.local[acc.NodeName] == nil {
				out.local[acc.NodeName] = map[string]Amount{}
			}
			out.local[acc.NodeName][r] += a
			return
		}
		for i := range out.global {
			if out.global[i].key == key {
				out.global[i].amounts[r] += a
				return
			}
		}
		out.global = append(out.global, globalContrib{key: key, access: acc, amounts: map[string]Amount{r: a}})
	}
	var in dracel.Device
	for _, sl := range cur {
		for di := range sl.Devices {
			dev := &sl.Devices[di]
			in = dracel.Device{Driver: sl.Driver, Attributes: dev.Attributes, AllowMultipleAllocations: &dev.AllowMultipleAllocations}
			if len(dev.Capacity) > 0 {
				in.Capacity = make(map[resourcev1.QualifiedName]resourcev1.DeviceCapacity, len(dev.Capacity))
				for k, q := range dev.Capacity {
					in.Capacity[k] = resourcev1.DeviceCapacity{Value: q}
				}
			}
			failed := false
			var hit []int // mappings, in order
			for _, c := range classNames {
				cl := d.classes[c]
				ok := cl.err == ""
				for _, sel := range cl.sels {
					if !ok {
						break
					}
					var err error
					if ok, err = sel.accepts(&in); err != nil {
						failed = true
					}
				}
				if !ok {
					continue
				}
				idx, mapped := d.byClass[c]
				if !mapped {
					if out.unbudgeted == nil {
						out.unbudgeted = map[string]int64{}
					}
					out.unbudgeted[c]++
					continue
				}
				for _, i := range idx {
					if !slices.Contains(hit, i) {
						hit = append(hit, i)
					}
				}
			}
			slices.Sort(hit)
			for _, i := range hit {
				m := d.mappings[i]
				if len(m.counters) == 0 {
					add(sl, dev, m.name, unit)
					continue
				}
				for si, src := range m.counters {
					if src.Driver != sl.Driver || src.err != "" {
						continue
					}
					if src.sel != nil {
						ok, err := src.sel.accepts(&in)
						if err != nil {
							failed = true
						}
						if !ok {
							continue
						}
					}
					for _, use := range dev.ConsumesCounters {
						key := fmt.Sprintf("%d/%d/%s", i, si, use.CounterSet)
						if counted[key] {
							continue
						}
						counter, ok := sets[use.CounterSet][src.Name]
						if !ok {
							continue
						}
						counted[key] = true
						add(sl, dev, m.name, AmountOf(counter.Value))
					}
				}
			}
			if failed {
				out.errors++
			}
		}
	}
	return out
}

// Unbudgeted is the number of devices an unmapped DeviceClass selects.
type Unbudgeted struct {
	DeviceClass string
	Devices     int64
}

// Unbudgeted lists, by DeviceClass, the devices published under classes
// that no mapping (explicit or through extendedResourceName) names: Kueue
// charges no budget for them.
func (s *State) Unbudgeted() []Unbudgeted {
	var out []Unbudgeted
	for _, c := range sortedKeys(s.dra.unbudget) {
		out = append(out, Unbudgeted{DeviceClass: c, Devices: s.dra.unbudget[c]})
	}
	return out
}

// UnattributedDRA lists DRA capacity that counts toward no flavor, by
// holder (a node name, or slice[/device] for devices reachable from
// several nodes) and logical name: devices on a node that has no Node
// object or matches no flavor, and devices whose node selection no flavor
// contains.
func (s *State) UnattributedDRA() []Unattributed {
	var out []Unattributed
	for _, h := range sortedKeys(s.dra.strays) {
		for _, r := range sortedKeys(s.dra.strays[h]) {
			reason := ReasonNoMatchingFlavor
			if m := s.hosts[h]; m != nil && m.reason != "" {
				reason = m.reason
			}
			out = append(out, Unattributed{Node: h, Resource: r, Reason: reason, Amount: s.dra.strays[h][r]})
		}
	}
	return out
}

// DRAProblems lists what keeps DRA devices from being counted: selectors
// that do not compile, and devices a selector failed on.
func (s *State) DRAProblems() []string {
	var out []string
	for _, c := range sortedKeys(s.dra.classes) {
		if e := s.dra.classes[c].err; e != "" {
			out = append(out, fmt.Sprintf("DeviceClass %s selects no device: %s", c, e))
		}
	}
	for _, m := range s.dra.mappings {
		for _, src := range m.counters {
			if src.err != "" {
				out = append(out, fmt.Sprintf("mapping %s counts no counter: %s", m.name, src.err))
			}
		}
	}
	if s.dra.errors > 0 {
		out = append(out, fmt.Sprintf("%d devices failed a CEL selector at evaluation and are not counted", s.dra.errors))
	}
	return out
}

// DRANames are the logical names DRA capacity is measured for, sorted.
func (s *State) DRANames() []string { return slices.Clone(s.dra.names) }

// dumpDRA renders the DRA state for Dump.
func (s *State) dumpDRA(w func(string, ...any)) {
	d := &s.dra
	if len(d.names) > 0 {
		w("dra names=%s", strings.Join(d.names, ","))
	}
	for _, m := range d.mappings {
		var srcs []string
		for _, c := range m.counters {
			srcs = append(srcs, fmt.Sprintf("%s@%s[%s]%s", c.Name, c.Driver, c.Expression(), c.err))
		}
		w("dra mapping %s classes=%s counters=%s", m.name, strings.Join(sortedKeys(m.classes), ","), strings.Join(srcs, ";"))
	}
	for _, c := range sortedKeys(d.classes) {
		cl := d.classes[c]
		w("dra class %s ext=%s selectors=%q err=%s", c, cl.spec.ExtendedResourceName, cl.spec.Selectors, cl.err)
	}
	for _, k := range slices.SortedFunc(maps.Keys(d.pools), comparePools) {
		p := d.pools[k]
		w("dra pool %s slices=%s complete=%t errors=%d", k, strings.Join(sortedKeys(p.slices), ","), p.contrib.complete, p.contrib.errors)
		for _, n := range sortedKeys(p.contrib.local) {
			w("  node %s %s", n, amountString(p.contrib.local[n]))
		}
		for _, g := range p.contrib.global {
			w("  global %s flavors=%s %s", g.key, strings.Join(g.flavors, ","), amountString(g.amounts))
		}
		for _, c := range sortedKeys(p.contrib.unbudgeted) {
			w("  unbudgeted %s=%d", c, p.contrib.unbudgeted[c])
		}
	}
	for _, n := range sortedKeys(d.nodes) {
		var parts []string
		for _, r := range sortedKeys(d.nodes[n]) {
			parts = append(parts, fmt.Sprintf("%s=%s/%d", r, d.nodes[n][r].amount, d.nodes[n][r].pools))
		}
		w("dra node %s {%s}", n, strings.Join(parts, ","))
	}
	for _, h := range sortedKeys(d.strays) {
		w("dra unattributed %s %s", h, amountString(d.strays[h]))
	}
	for _, c := range sortedKeys(d.unbudget) {
		w("dra unbudgeted %s=%d", c, d.unbudget[c])
	}
	if d.errors > 0 {
		w("dra errors=%d", d.errors)
	}
}
