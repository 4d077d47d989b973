package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// Admission is the rule book's answer to one write of the tree: what the
// admission webhook answers, and what `kubectl ome quota validate` will
// print for a write it checks.
type Admission struct {
	Allowed bool
	// Message says why a write is denied; it is empty when it is allowed.
	Message string
	// Denied are the violations that the write adds or makes worse, the
	// written node's own first. A refusal of a deletion carries none.
	Denied []Violation
	// Warnings go back with an admitted write: a budget above capacity.
	Warnings []string
}

// MaxListed bounds how many violations, or children, one denial lists.
const MaxListed = 10

// SameShape reports whether two specs of node name read the same to every
// rule: role, parent, team-only fields and budgets (pairs, nominal amounts,
// whether limits are set). A write between two such specs cannot change a
// verdict, so it needs neither judging nor serializing.
func SameShape(name string, a, b *v1beta1.AcceleratorQuotaSpec) bool {
	return shapeOf(name, a).equal(shapeOf(name, b))
}

// AdmitLowering judges, like Admit, an update of node name from old to spec
// that does nothing but lower or drop a team's budgets, and reports false,
// judging nothing, for any other write or when the state does not hold the
// node as old has it. Such a write's verdict depends on old and spec alone,
// whatever else is written at the same time, and it cannot make another
// write's verdict wrong: it only lowers its parent's children's total, and
// every rule that reads that total is broken less by a lower one. So it
// needs no serializing with other writes (docs/webhook.md). The team stays
// a team (not root) under the same parentRef; every budget of spec has the
// pair of one of old's, with a nominal no larger (an amount above MaxAmount
// counts as 0, as everywhere, and is BudgetInvalid on the node itself).
func (s *State) AdmitLowering(name string, old, spec *v1beta1.AcceleratorQuotaSpec) (Admission, bool) {
	if old == nil {
		return Admission{}, false
	}
	return s.AdmitLoweringParsed(Parse(name, old), Parse(name, spec))
}

// AdmitLoweringParsed is AdmitLowering on specs parsed beforehand (Parse),
// so that a caller that holds the reducer's lock parses nothing under it.
func (s *State) AdmitLoweringParsed(old, w Parsed) (Admission, bool) {
	m := s.members[w.name]
	if old.spec == nil || w.spec == nil || old.name != w.name || m == nil || !m.shape.equal(old.sh) ||
		w.name == v1beta1.RootName || !within(old.sh, w.sh) {
		return Admission{}, false
	}
	return s.AdmitParsed(w), true
}

// Parsed is one node's spec as the rules read it, its budgets parsed:
// a judgement made with it under the reducer's lock parses nothing there.
type Parsed struct {
	name string
	spec *v1beta1.AcceleratorQuotaSpec // nil: the node is deleted
	sh   shape
}

// Name is the node the spec is written to.
func (p Parsed) Name() string { return p.name }

// Parse reads spec, written to node name (nil: deleting it), for the
// rules: AdmitParsed, AdmitLoweringParsed and CoveredBy take what it
// returns.
func Parse(name string, spec *v1beta1.AcceleratorQuotaSpec) Parsed {
	p := Parsed{name: name, spec: spec}
	if spec != nil {
		p.sh = shapeOf(name, spec)
	}
	return p
}

// Within reports whether spec, written to node name, is ceiling or a
// lowering of it: both are a team (not root) under the same parentRef,
// and every budget of spec has the pair of one of ceiling's, with a
// nominal no larger.
func Within(name string, ceiling, spec *v1beta1.AcceleratorQuotaSpec) bool {
	return name != v1beta1.RootName && ceiling != nil && spec != nil && within(shapeOf(name, ceiling), shapeOf(name, spec))
}

// SameSeat reports whether a and b, written to node name, are both a team
// (not root) under the same parentRef, alike in all but their budgets'
// amounts: what a standing reservation covers (Standing).
func SameSeat(name string, a, b *v1beta1.AcceleratorQuotaSpec) bool {
	return name != v1beta1.RootName && a != nil && b != nil && seat(shapeOf(name, a), shapeOf(name, b))
}

func seat(o, n shape) bool {
	return o.role == v1beta1.RoleClusterQueue && n.role == o.role && n.parent == o.parent &&
		n.hasParentRef == o.hasParentRef && n.priorityTier == o.priorityTier
}

func within(o, n shape) bool {
	if !seat(o, n) {
		return false
	}
	for _, b := range n.budgets {
		i := slices.IndexFunc(o.budgets, func(ob Budget) bool { return ob.Pair == b.Pair })
		if i < 0 || b.Nominal > o.budgets[i].Nominal {
			return false
		}
	}
	return true
}

// Admit judges writing spec to node name (nil spec: deleting it) on a whole
// tree, from scratch, in O(tree): the rule book's reference. It evaluates the
// tree before and after the write and denies the violations the write adds
// (Diff, by node, reason and subject) or makes worse under the same key (a
// larger overrun of the same budget, a node too deep that sits deeper).
// CapacityExceeded never denies: it comes back as a warning. Deleting root or
// a node with children, and a root that has a parent or is not a Cohort, are
// always denied. State.Admit gives the same answer incrementally.
func Admit(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config, name string, spec *v1beta1.AcceleratorQuotaSpec) Admission {
	if a, refused := refuseDelete(name, spec, treeChildren(tree, name)); refused {
		return a
	}
	after := maps.Clone(tree)
	if after == nil {
		after = Tree{}
	}
	if spec == nil {
		delete(after, name)
	} else {
		after[name] = spec
	}
	before, afterV := Evaluate(tree, marks, flavors, cfg), Evaluate(after, marks, flavors, cfg)
	return conclude(name, spec, before, afterV,
		newTreeView(tree, marks, flavors, cfg), newTreeView(after, marks, flavors, cfg))
}

// Admit judges writing spec to node name (nil spec: deleting it) on the
// state's tree, with its marks, flavors and configuration, and gives the
// same answer as the package's Admit on s.Tree(). It reads only the nodes
// the write can change: the node, its old and new parent, its children when
// its role changes, and the nodes whose place changes when it moves, found
// through the reducer's indexes. A change of budgets or role costs
// O(children), a move O(depth) plus the nodes whose place changes. It does
// not modify s.
func (s *State) Admit(name string, spec *v1beta1.AcceleratorQuotaSpec) Admission {
	return s.AdmitParsed(Parse(name, spec))
}

// AdmitParsed is Admit on a write parsed beforehand (Parse).
func (s *State) AdmitParsed(w Parsed) Admission {
	name, spec := w.name, w.spec
	if a, refused := refuseDelete(name, spec, s.children(name)); refused {
		return a
	}
	if a, refused := s.refuseUnderDeleting(name, spec); refused {
		return a
	}
	if a, refused := s.refuseGone(name, spec); refused {
		return a
	}
	before := stateView{s}
	after := s.writeView(w)
	names := after.affected()
	return conclude(name, spec, violationsIn(before, names), violationsIn(after, names), before, after)
}

// children are the nodes whose parentRef names parent, by name, parent
// itself left out.
func (s *State) children(parent string) []string {
	kids := s.kids[parent]
	if i, ok := slices.BinarySearch(kids, parent); ok {
		return slices.Delete(slices.Clone(kids), i, i+1)
	}
	return kids
}

// treeChildren lists the nodes of tree whose parentRef names parent, by name,
// parent itself left out.
func treeChildren(tree Tree, parent string) []string {
	var out []string
	for n, spec := range tree {
		if n != parent && parentOf(n, spec) == parent {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// refuseDelete is the rule of deletions: root stays, and so does a node with
// children.
func refuseDelete(name string, spec *v1beta1.AcceleratorQuotaSpec, kids []string) (Admission, bool) {
	if spec != nil {
		return Admission{}, false
	}
	if name == v1beta1.RootName {
		return Admission{Message: "root is the top of the quota tree and cannot be deleted while the quota manager runs: " +
			"delete the other nodes, uninstall the quota manager, then clear root's finalizer and delete it"}, true
	}
	if len(kids) > 0 {
		return Admission{Message: fmt.Sprintf("%s still has children (%s): delete them, or point their spec.parentRef at another node, first",
			name, listNames(kids))}, true
	}
	return Admission{}, false
}

// refuseUnderDeleting is the rule of nodes being deleted: a node whose
// deletionTimestamp is set goes away once its finalizers are released,
// with no review of that removal, so a write that puts a node under it (a
// create, or a move) is refused; the node would be left ParentMissing.
// Only the state knows it: the package's Admit, on a bare tree, does not.
func (s *State) refuseUnderDeleting(name string, spec *v1beta1.AcceleratorQuotaSpec) (Admission, bool) {
	if spec == nil {
		return Admission{}, false
	}
	p := parentOf(name, spec)
	pm := s.members[p]
	if pm == nil || !pm.deleting || p == name {
		return Admission{}, false
	}
	if m := s.members[name]; m != nil && m.shape.parent == p {
		return Admission{}, false // already under it: the write puts nothing new there
	}
	return Admission{Message: fmt.Sprintf("%s: %s is being deleted (it has a deletionTimestamp and waits for its finalizers), "+
		"so nothing can be put under it: name another parent in spec.parentRef, or wait until %s is gone and create it again first", name, p, p)}, true
}

// conclude turns the violations of the tree before and after a write (of
// every node, or of every node the write can change) into the answer.
func conclude(name string, spec *v1beta1.AcceleratorQuotaSpec, before, after []Violation, bv, av view) Admission {
	added := Diff(before, after)
	added = append(added, worsened(before, after, bv, av)...)
	if spec != nil && name == v1beta1.RootName {
		// Root's kind is checked on every write of root, even when it was
		// already broken: root must stay a Cohort without a parent.
		have := map[ViolationKey]bool{}
		for _, v := range added {
			have[v.Key()] = true
		}
		for _, v := range after {
			if v.Node == name && v.Reason == ReasonNodeKindInvalid && !have[v.Key()] {
				added = append(added, v)
			}
		}
	}
	var denied []Violation
	for _, v := range added {
		if v.Reason != ReasonCapacityExceeded && v.Reason != ReasonFrozen {
			denied = append(denied, v)
		}
	}
	var warnings []string
	for _, v := range after {
		if v.Node == name && v.Reason == ReasonCapacityExceeded {
			warnings = append(warnings, fmt.Sprintf("%s: %s. Admitted anyway: the node reports CapacityExceeded, and stays frozen, until it fits", name, v.Message))
		}
	}
	if len(denied) == 0 {
		return Admission{Allowed: true, Warnings: warnings}
	}
	// The written node's own violations first: they are the ones to fix.
	slices.SortStableFunc(denied, func(a, b Violation) int {
		return boolRank(a.Node != name) - boolRank(b.Node != name)
	})
	return Admission{Message: ViolationsMessage(denied), Denied: denied}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ViolationsMessage names the node of each violation before the rule
// book's message, unless the message starts with it already (as
// ContainmentViolated's does), and joins them with "; ", listing at most
// MaxListed.
func ViolationsMessage(vs []Violation) string {
	lines := make([]string, 0, min(len(vs), MaxListed)+1)
	for i, v := range vs {
		if i == MaxListed {
			lines = append(lines, fmt.Sprintf("and %d more", len(vs)-MaxListed))
			break
		}
		if strings.HasPrefix(v.Message, v.Node+": ") {
			lines = append(lines, v.Message)
		} else {
			lines = append(lines, v.Node+": "+v.Message)
		}
	}
	return strings.Join(lines, "; ")
}

func listNames(names []string) string {
	if len(names) > MaxListed {
		return strings.Join(names[:MaxListed], ", ") + fmt.Sprintf(" and %d more", len(names)-MaxListed)
	}
	return strings.Join(names, ", ")
}

// worsened returns the violations of after that were already in before by
// key but are larger now: a Cohort whose children exceed its budget for a
// pair by more, or a node too deep that sits deeper. The key alone says a
// write that shrinks an overrun is no worse; the amounts say one that grows
// it is.
func worsened(before, after []Violation, bv, av view) []Violation {
	prev := make(map[ViolationKey]bool, len(before))
	for _, v := range before {
		prev[v.Key()] = true
	}
	var out []Violation
	for _, v := range after {
		if !prev[v.Key()] {
			continue
		}
		switch v.Reason {
		case ReasonContainmentViolated:
			ob, okb := overrun(bv, v)
			oa, oka := overrun(av, v)
			if okb && oka && oa.Cmp(ob) > 0 {
				out = append(out, v)
			}
		case ReasonDepthExceeded:
			if av.placeOf(v.Node).Depth > bv.placeOf(v.Node).Depth {
				out = append(out, v)
			}
		}
	}
	return out
}

// overrun is how far the children of v's node exceed its budget for the
// pair that is v's subject.
func overrun(tv view, v Violation) (Total, bool) {
	for _, b := range tv.budgetsOf(v.Node) {
		if b.Pair.String() == v.Subject {
			return tv.ChildTotal(v.Node, b.Pair).Add(-b.Nominal), true
		}
	}
	return Total{}, false
}

// view is a tree as the rules read it: its nodes' specs, budgets and
// places, and an Env.
type view interface {
	Env
	// specOf is a node's spec, nil when it does not exist.
	specOf(name string) *v1beta1.AcceleratorQuotaSpec
	budgetsOf(name string) []Budget
	placeOf(name string) Place
}

// violationsIn runs the rule book on the named nodes of v that exist, in the
// order given: by name, they come out as Evaluate orders them.
func violationsIn(v view, names []string) []Violation {
	var out []Violation
	for _, name := range names {
		spec := v.specOf(name)
		if spec == nil {
			continue
		}
		f := Facts{Name: name, Spec: spec, Budgets: v.budgetsOf(name), Place: v.placeOf(name)}
		if p := parentOf(name, spec); p != "" {
			if ps := v.specOf(p); ps != nil {
				f.ParentRole = ps.Role
			}
		}
		out = EvaluateNode(out, &f, v)
	}
	return out
}

// treeView is a whole tree, computed from scratch.
type treeView struct {
	*staticEnv
	tree    Tree
	budgets map[string][]Budget
	places  map[string]Place
}

func newTreeView(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config) *treeView {
	tv := &treeView{
		staticEnv: &staticEnv{marks: marks, flavors: flavors, maxDepth: cfg.MaxTreeDepth, sums: map[string]map[Pair]Total{}},
		tree:      tree, budgets: make(map[string][]Budget, len(tree)), places: Places(tree),
	}
	for name, spec := range tree {
		tv.budgets[name] = BudgetsOf(spec)
		if p := parentOf(name, spec); p != "" {
			if tv.sums[p] == nil {
				tv.sums[p] = map[Pair]Total{}
			}
			for _, b := range tv.budgets[name] {
				tv.sums[p][b.Pair] = tv.sums[p][b.Pair].Add(b.Nominal)
			}
		}
	}
	return tv
}

func (t *treeView) specOf(name string) *v1beta1.AcceleratorQuotaSpec { return t.tree[name] }
func (t *treeView) budgetsOf(name string) []Budget                   { return t.budgets[name] }
func (t *treeView) placeOf(name string) Place                        { return t.places[name] }

// stateView is the state's tree as the reducer keeps it.
type stateView struct{ *State }

func (s stateView) specOf(name string) *v1beta1.AcceleratorQuotaSpec {
	if m := s.members[name]; m != nil {
		return m.spec
	}
	return nil
}

func (s stateView) budgetsOf(name string) []Budget {
	if m := s.members[name]; m != nil {
		return m.shape.budgets
	}
	return nil
}

func (s stateView) placeOf(name string) Place {
	if m := s.members[name]; m != nil {
		return m.place
	}
	return Place{}
}

// afterWrite is the state's tree as it would be after one write: the
// state's indexes with the written node's difference laid over them.
type afterWrite struct {
	*State
	name    string
	spec    *v1beta1.AcceleratorQuotaSpec // nil: deleted
	old, sh shape                         // the node's shape before and after (zero: absent)
	existed bool
	// places holds the places that the write changes.
	places map[string]Place
}

func (s *State) writeView(p Parsed) *afterWrite {
	name, spec := p.name, p.spec
	w := &afterWrite{State: s, name: name, spec: spec, places: map[string]Place{}}
	if m := s.members[name]; m != nil {
		w.old, w.existed = m.shape, true
	}
	if spec != nil {
		w.sh = p.sh
		if !w.existed || w.old.parent != w.sh.parent {
			w.replace()
		}
	}
	return w
}

func (w *afterWrite) specOf(name string) *v1beta1.AcceleratorQuotaSpec {
	if name == w.name {
		return w.spec
	}
	if m := w.members[name]; m != nil {
		return m.spec
	}
	return nil
}

func (w *afterWrite) budgetsOf(name string) []Budget {
	if name == w.name {
		return w.sh.budgets
	}
	if m := w.members[name]; m != nil {
		return m.shape.budgets
	}
	return nil
}

func (w *afterWrite) placeOf(name string) Place {
	if p, ok := w.places[name]; ok {
		return p
	}
	if m := w.members[name]; m != nil {
		return m.place
	}
	return Place{}
}

// ChildTotal is the state's sum with the written node's budgets moved from
// its old parent to its new one.
func (w *afterWrite) ChildTotal(parent string, p Pair) Total {
	t := w.sums[parent][p]
	if parent != "" && parent == w.old.parent {
		t = t.Add(-nominalOf(w.old.budgets, p))
	}
	if parent != "" && parent == w.sh.parent {
		t = t.Add(nominalOf(w.sh.budgets, p))
	}
	return t
}

func nominalOf(budgets []Budget, p Pair) Amount {
	for _, b := range budgets {
		if b.Pair == p {
			return b.Nominal
		}
	}
	return 0
}

// replace finds the written node's new place and the places of its
// descendants as far as they change, as the reducer's replace does.
func (w *afterWrite) replace() {
	np := w.writtenPlace()
	if w.existed && np.Equal(w.members[w.name].place) {
		return // so are its descendants'
	}
	w.places[w.name] = np
	// The children index differs from the state's only by the written node,
	// which descend visits first.
	w.descend(w.name, np, w.placeOf, func(k string, kp Place) { w.places[k] = kp })
}

// writtenPlace is the written node's place: it walks up from the new
// parent, O(depth), to find out whether the walk comes back to the node.
// Otherwise the parent's chain does not pass through the node, so the
// parent's place is the one the state keeps.
func (w *afterWrite) writtenPlace() Place {
	if w.name == v1beta1.RootName {
		return rootPlace
	}
	p := w.sh.parent
	if p == "" || w.specOf(p) == nil {
		return missingPlace(p)
	}
	path := []string{w.name}
	seen := map[string]bool{}
	for cur := p; ; {
		if cur == w.name {
			return cyclePlace(path, 0)
		}
		cm := w.members[cur]
		if seen[cur] || cm == nil || cm.shape.parent == "" {
			break // a loop that does not pass through the node, or the top
		}
		seen[cur] = true
		path = append(path, cur)
		cur = cm.shape.parent
	}
	return childPlace(p, w.members[p].place)
}

// affected lists, by name, the nodes whose rules the write can change: the
// node, its old and new parent (their children's sums), its children when
// it is created or its role changes (their parent's role), and the nodes
// whose place changes.
func (w *afterWrite) affected() []string {
	set := map[string]struct{}{w.name: {}}
	for _, p := range []string{w.old.parent, w.sh.parent} {
		if p != "" {
			set[p] = struct{}{}
		}
	}
	if w.spec != nil && (!w.existed || w.old.role != w.sh.role) {
		for _, k := range w.kids[w.name] {
			set[k] = struct{}{}
		}
	}
	for n := range w.places {
		set[n] = struct{}{}
	}
	return slices.Sorted(maps.Keys(set))
}

// Generation is a node's metadata.generation as last seen, and whether the
// node exists: the webhook knows from it that a write it admitted has
// landed.
func (s *State) Generation(name string) (int64, bool) {
	if m := s.members[name]; m != nil {
		return m.gen, true
	}
	return 0, false
}

// CheckCopyWrite is a member cluster's rule on the copies that a
// management plane projected onto it (the objects labelled
// v1beta1.OriginLabel): only a plane's identity may write or delete one,
// or make a node a copy. oldOrigin and newOrigin are the label's value
// before and after the write ("" when absent; a delete has no after);
// planes are the identities that write copies: user names, and groups as
// "group:NAME". It returns why the write is refused, or "" when it is not
// about a copy or comes from a plane.
func CheckCopyWrite(node, oldOrigin, newOrigin, user string, groups, planes []string) string {
	if oldOrigin == "" && newOrigin == "" {
		return ""
	}
	for _, p := range planes {
		if name, ok := strings.CutPrefix(p, "group:"); ok && slices.Contains(groups, name) || p == user {
			return ""
		}
	}
	origin := cmp.Or(oldOrigin, newOrigin)
	if len(planes) == 0 {
		return fmt.Sprintf("%s is a copy of a fleet node, projected by management plane %q, and this cluster names no plane that may write copies (--webhook-projection-writers): change the node on the plane", node, origin)
	}
	return fmt.Sprintf("%s is a copy of a fleet node, projected by management plane %q: only the plane changes it (%s); change the node on the plane", node, origin, strings.Join(planes, ", "))
}
