package state

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// Reason is why a node is in its state: a rule it breaks, Frozen, or
// Admitted when it is Ready. It is the reason of the node's Ready and
// Degraded conditions.
type Reason string

// Reasons, as in DECISIONS.md's rule table.
const (
	ReasonAdmitted            Reason = "Admitted"
	ReasonParentMissing       Reason = "ParentMissing"
	ReasonParentCycle         Reason = "ParentCycle"
	ReasonUnreachable         Reason = "Unreachable"
	ReasonNodeKindInvalid     Reason = "NodeKindInvalid"
	ReasonDepthExceeded       Reason = "DepthExceeded"
	ReasonBudgetInvalid       Reason = "BudgetInvalid"
	ReasonFlavorMissing       Reason = "FlavorMissing"
	ReasonSplitInvalid        Reason = "SplitInvalid"
	ReasonContainmentViolated Reason = "ContainmentViolated"
	ReasonCapacityExceeded    Reason = "CapacityExceeded"
	ReasonFrozen              Reason = "Frozen"
)

// Precedence is the order in which a node's violations are reported, and so
// which one is its primary reason when it breaks several rules: where the
// node sits in the tree first (its parent chain, then its kind, then its
// depth), then its budgets (an amount no one can use, then a missing
// flavor, before the amounts checked on them). A node that breaks a rule itself reports that rule even when an
// ancestor is broken too: its own fault is the one it can fix.
var Precedence = []Reason{
	ReasonParentMissing, ReasonParentCycle, ReasonUnreachable, ReasonNodeKindInvalid,
	ReasonDepthExceeded, ReasonBudgetInvalid, ReasonFlavorMissing, ReasonSplitInvalid, ReasonContainmentViolated, ReasonCapacityExceeded,
}

// Messages of a healthy node's conditions, as the guide prints them.
const (
	MessageAdmitted    = "node is a valid member of the quota tree"
	MessageNoViolation = "no invariant violated"
)

// Violation is one rule broken by one node.
type Violation struct {
	// Node is the node that breaks the rule. For ContainmentViolated it is
	// the parent whose budget its children exceed.
	Node   string
	Reason Reason
	// Subject says what in the node breaks it: a budget's pair
	// ("nvidia.com/gpu@a100"), a field ("parentRef", "priorityTier",
	// "nvidia.com/gpu@a100.borrowingLimit", "nvidia.com/gpu@a100.nominal",
	// "budgets", "role", "parent"), or
	// "" when the node as a whole does (DepthExceeded, Unreachable).
	Subject string
	Message string
}

// ViolationKey identifies a violation across writes, whatever its amounts:
// a write that shrinks an overrun keeps the key.
type ViolationKey struct {
	Node    string
	Reason  Reason
	Subject string
}

// Key is the violation's stable identity.
func (v Violation) Key() ViolationKey { return ViolationKey{v.Node, v.Reason, v.Subject} }

// String is "node Reason subject: message", without the subject when it is
// "".
func (v Violation) String() string {
	if v.Subject == "" {
		return fmt.Sprintf("%s %s: %s", v.Node, v.Reason, v.Message)
	}
	return fmt.Sprintf("%s %s %s: %s", v.Node, v.Reason, v.Subject, v.Message)
}

// Diff returns the violations of after whose key is not in before: what a
// write makes worse. It keeps after's order.
func Diff(before, after []Violation) []Violation {
	seen := make(map[ViolationKey]bool, len(before))
	for _, v := range before {
		seen[v.Key()] = true
	}
	var out []Violation
	for _, v := range after {
		if !seen[v.Key()] {
			out = append(out, v)
		}
	}
	return out
}

// Place is where a node sits relative to root, following parentRef.
type Place struct {
	// Reason is "" when the node reaches root, else ParentMissing,
	// ParentCycle or Unreachable.
	Reason Reason
	// Depth is the number of edges below root (root is 0) when the node
	// reaches root, else -1.
	Depth int
	// Parent is, for ParentMissing, the parent named but missing; "" when
	// the node names none.
	Parent string
	// Via is, for Unreachable, the nearest ancestor that is ParentMissing or
	// ParentCycle, and ViaReason which of the two it is.
	Via       string
	ViaReason Reason
	// Cycle is, for ParentCycle, the loop of parentRefs from this node.
	Cycle []string
}

// Equal reports whether two places are the same.
func (p Place) Equal(o Place) bool {
	return p.Reason == o.Reason && p.Depth == o.Depth && p.Parent == o.Parent &&
		p.Via == o.Via && p.ViaReason == o.ViaReason && slices.Equal(p.Cycle, o.Cycle)
}

var rootPlace = Place{Depth: 0}

func missingPlace(parent string) Place {
	return Place{Reason: ReasonParentMissing, Depth: -1, Parent: parent}
}

// cyclePlace is the place of loop[i] on the loop of parentRefs loop.
func cyclePlace(loop []string, i int) Place {
	rot := make([]string, 0, len(loop))
	rot = append(append(rot, loop[i:]...), loop[:i]...)
	return Place{Reason: ReasonParentCycle, Depth: -1, Cycle: rot}
}

// childPlace is the place of a node whose existing parent, not on a loop
// with it, is at pp.
func childPlace(parent string, pp Place) Place {
	switch pp.Reason {
	case "":
		return Place{Depth: pp.Depth + 1}
	case ReasonParentMissing, ReasonParentCycle:
		return Place{Reason: ReasonUnreachable, Depth: -1, Via: parent, ViaReason: pp.Reason}
	default:
		return Place{Reason: ReasonUnreachable, Depth: -1, Via: pp.Via, ViaReason: pp.ViaReason}
	}
}

// parentOf is the parent a node's place follows: none for root, whatever
// its spec says (root with a parentRef breaks NodeKindInvalid instead).
func parentOf(name string, spec *v1beta1.AcceleratorQuotaSpec) string {
	if name == v1beta1.RootName || spec.ParentRef == nil {
		return ""
	}
	return spec.ParentRef.Name
}

// Env is what the rules read beyond the node itself. State implements it;
// Evaluate builds one for a hypothetical tree.
type Env interface {
	// FlavorExists reports whether a Kueue ResourceFlavor of that name exists.
	FlavorExists(flavor string) bool
	// ChildTotal is the sum of the nominal amounts for p of parent's
	// children, exact however large.
	ChildTotal(parent string, p Pair) Total
	// HighWaterMark is p's high-water mark on root; 0 when p has none.
	HighWaterMark(p Pair) Amount
	// MaxTreeDepth is the configured maximum depth; 0 means no limit.
	MaxTreeDepth() int
	// Fleet is, on a management plane (ok), its member clusters, sorted,
	// and the first of them that has not reported its capacity yet (""
	// when every one has). On a management plane FlavorExists and
	// HighWaterMark read the fleet: a flavor some member has, the sum of
	// the members' marks.
	Fleet() (members []string, waiting string, ok bool)
	// MemberMark is a member cluster's high-water mark of p.
	MemberMark(member string, p Pair) Amount
}

// Facts is what the rules read of one node.
type Facts struct {
	Name    string
	Spec    *v1beta1.AcceleratorQuotaSpec
	Budgets []Budget // BudgetsOf(Spec)
	Place   Place
	// ParentRole is the role of the node's parent when it exists, else "".
	ParentRole v1beta1.Role
	// Splits is what CheckSplit made of a team's budgets: an output of
	// the rule book, read by the reducer (State.Splits).
	Splits []BudgetSplit
}

// A rule appends the violations of one node to dst. The rule book lists
// them in Precedence order.
var ruleBook = [...]func(dst []Violation, f *Facts, env Env) []Violation{
	CheckParent, CheckKind, CheckDepth, CheckBudgets, CheckFlavors, CheckSplit, CheckContainment, CheckCapacity,
}

// EvaluateNode appends every violation of one node to dst, in Precedence
// order: its first is the node's primary reason.
func EvaluateNode(dst []Violation, f *Facts, env Env) []Violation {
	for _, rule := range ruleBook {
		dst = rule(dst, f, env)
	}
	return dst
}

// CheckParent is ParentMissing (no parentRef, or a parent that does not
// exist), ParentCycle (parentRef leads back to the node) and Unreachable (an
// ancestor is missing or in a cycle).
func CheckParent(dst []Violation, f *Facts, _ Env) []Violation {
	p := f.Place
	switch p.Reason {
	case ReasonParentMissing:
		msg := "node has no spec.parentRef, and only root may have none: name its parent"
		if p.Parent != "" {
			msg = fmt.Sprintf("parent %s does not exist: create it, or point spec.parentRef at an existing node", p.Parent)
		}
		return append(dst, Violation{f.Name, ReasonParentMissing, "parentRef", msg})
	case ReasonParentCycle:
		return append(dst, Violation{f.Name, ReasonParentCycle, "parentRef", fmt.Sprintf(
			"spec.parentRef leads back to this node (%s): point one of them at a node under root",
			loopPath(p.Cycle, f.Name))})
	case ReasonUnreachable:
		return append(dst, Violation{f.Name, ReasonUnreachable, "", fmt.Sprintf(
			"ancestor %s is %s, so this node cannot reach root: fix %s's spec.parentRef", p.Via, p.ViaReason, p.Via)})
	}
	return dst
}

// maxPath bounds the names a loop's message lists: a loop of any length
// names its first and last few nodes and counts the rest, so that every
// member's message stays far below the CRD's bound on a condition message.
const maxPath = 8

// loopPath is a loop that starts at a node, and ends back at it (self).
func loopPath(loop []string, self string) string {
	names := append(slices.Clip(loop), self)
	if len(names) > maxPath {
		keep := maxPath / 2
		rest := fmt.Sprintf("... %d more ...", len(names)-2*keep)
		names = append(append(slices.Clone(names[:keep]), rest), names[len(names)-keep:]...)
	}
	return strings.Join(names, " -> ")
}

// CheckKind is NodeKindInvalid: an unknown role; root that is not a Cohort
// or has a parent; a child under a ClusterQueue (the child breaks the rule,
// as it is the one that names a team as its parent); team-only fields
// (priorityTier, borrowingLimit, lendingLimit) on a Cohort; a team without
// budgets; spec.goneClusters on any node but root (gone.go).
func CheckKind(dst []Violation, f *Facts, _ Env) []Violation {
	bad := func(subject, format string, args ...any) {
		dst = append(dst, Violation{f.Name, ReasonNodeKindInvalid, subject, fmt.Sprintf(format, args...)})
	}
	role := f.Spec.Role
	switch role {
	case v1beta1.RoleCohort, v1beta1.RoleClusterQueue:
		if f.Name == v1beta1.RootName && role != v1beta1.RoleCohort {
			bad("role", "root must be a Cohort: set spec.role to Cohort")
		}
	default:
		bad("role", "role %q is neither Cohort nor ClusterQueue: set spec.role to one of them", role)
	}
	if f.Name == v1beta1.RootName && f.Spec.ParentRef != nil {
		bad("parentRef", "root must have no parent: remove spec.parentRef")
	}
	if f.ParentRole == v1beta1.RoleClusterQueue {
		bad("parent", "parent %s is a ClusterQueue (a team), which cannot have children: name a Cohort as the parent", parentOf(f.Name, f.Spec))
	}
	switch role {
	case v1beta1.RoleCohort:
		if f.Spec.PriorityTier != nil {
			bad("priorityTier", "priorityTier is a team-only field and this node is a Cohort: remove it, or make the node a ClusterQueue")
		}
		for _, b := range f.Budgets {
			if b.BorrowingLimit {
				bad(b.Pair.String()+".borrowingLimit", "budget %s on %s sets borrowingLimit, a team-only field, and this node is a Cohort: remove it, or make the node a ClusterQueue", b.Resource, b.Flavor)
			}
			if b.LendingLimit {
				bad(b.Pair.String()+".lendingLimit", "budget %s on %s sets lendingLimit, a team-only field, and this node is a Cohort: remove it, or make the node a ClusterQueue", b.Resource, b.Flavor)
			}
		}
	case v1beta1.RoleClusterQueue:
		if len(f.Budgets) == 0 {
			bad("budgets", "a ClusterQueue (a team) needs at least one budget: add one to spec.budgets")
		}
	}
	return goneOnRootOnly(dst, f)
}

// CheckDepth is DepthExceeded: more edges below root than the configured
// maximum, when there is one.
func CheckDepth(dst []Violation, f *Facts, env Env) []Violation {
	if max := env.MaxTreeDepth(); max > 0 && f.Place.Reason == "" && f.Place.Depth > max {
		return append(dst, Violation{f.Name, ReasonDepthExceeded, "", fmt.Sprintf(
			"node is %d levels below the root, exceeding the configured maximum of %d", f.Place.Depth, max)})
	}
	return dst
}

// CheckBudgets is BudgetInvalid: an amount above MaxAmount, which the
// manager cannot count exactly; and, on a team, what Kueue v0.17's own
// ClusterQueue validation would refuse in the ClusterQueue projected from
// it, so that the node is frozen with a clear message instead of being
// written and refused forever: a lendingLimit above nominal, and a resource
// name that is not a qualified name (Kueue checks it as a label key; the
// CRD's pattern lets a name part longer than 63 characters through).
// Kueue's other limits on what is projected hold by construction: the
// CRD allows at most 16 budgets, limits are written only with a cohort,
// and amounts are never negative.
func CheckBudgets(dst []Violation, f *Facts, _ Env) []Violation {
	team := f.Spec.Role == v1beta1.RoleClusterQueue
	for _, b := range f.Budgets {
		if b.Oversized != "" {
			field, _, _ := strings.Cut(b.Oversized, " ")
			dst = append(dst, Violation{f.Name, ReasonBudgetInvalid, b.Pair.String() + "." + field, fmt.Sprintf(
				"budget %s on %s: %s is above %s (10^15), the largest amount the quota manager counts: lower it",
				b.Resource, b.Flavor, b.Oversized, MaxAmount)})
			continue
		}
		if !team {
			continue
		}
		if errs := validation.IsQualifiedName(b.Resource); len(errs) > 0 {
			dst = append(dst, Violation{f.Name, ReasonBudgetInvalid, b.Pair.String() + ".resourceName", fmt.Sprintf(
				"budget %s on %s: Kueue refuses the resource name in a ClusterQueue (%s): fix spec.budgets' resourceName",
				b.Resource, b.Flavor, strings.Join(errs, "; "))})
		}
		if b.LendingAboveNominal {
			dst = append(dst, Violation{f.Name, ReasonBudgetInvalid, b.Pair.String() + ".lendingLimit", fmt.Sprintf(
				"budget %s on %s: lendingLimit is above nominal %s, and Kueue refuses a ClusterQueue that lends more than its nominal quota: lower lendingLimit to at most %s, or remove it to lend all of it",
				b.Resource, b.Flavor, b.Nominal, b.Nominal)})
		}
	}
	return dst
}

// CheckFlavors is FlavorMissing: a budget names a ResourceFlavor that does
// not exist.
func CheckFlavors(dst []Violation, f *Facts, env Env) []Violation {
	for _, b := range f.Budgets {
		if !env.FlavorExists(b.Flavor) {
			dst = append(dst, Violation{f.Name, ReasonFlavorMissing, b.Pair.String(), fmt.Sprintf(
				"budget %s names ResourceFlavor %s, which does not exist: create it or fix the budget", b.Resource, b.Flavor)})
		}
	}
	return dst
}

// CheckContainment is ContainmentViolated: a Cohort's children's nominal
// for a pair totals more than the Cohort's own budget for it. A Cohort
// without a budget for a pair does not cap its children on it; a team's
// children break NodeKindInvalid instead.
func CheckContainment(dst []Violation, f *Facts, env Env) []Violation {
	if f.Spec.Role != v1beta1.RoleCohort {
		return dst
	}
	for _, b := range f.Budgets {
		if b.Oversized != "" {
			continue // BudgetInvalid says what to fix first
		}
		if total := env.ChildTotal(f.Name, b.Pair); total.Cmp(TotalOf(b.Nominal)) > 0 {
			dst = append(dst, Violation{f.Name, ReasonContainmentViolated, b.Pair.String(), fmt.Sprintf(
				"%s: budget %s on %s is %s but its children total %s", f.Name, b.Resource, b.Flavor, b.Nominal, total)})
		}
	}
	return dst
}

// CheckCapacity is CapacityExceeded: a budget's nominal is above its pair's
// high-water mark on root. A pair without a mark counts as 0. A budget on a
// missing flavor is not checked: FlavorMissing says what to fix first.
func CheckCapacity(dst []Violation, f *Facts, env Env) []Violation {
	for _, b := range f.Budgets {
		if !env.FlavorExists(b.Flavor) || b.Oversized != "" {
			continue
		}
		if mark := env.HighWaterMark(b.Pair); b.Nominal > mark {
			dst = append(dst, Violation{f.Name, ReasonCapacityExceeded, b.Pair.String(), fmt.Sprintf(
				"budget %s on %s is %s but the high-water mark on root is %s: lower the budget, or add capacity", b.Resource, b.Flavor, b.Nominal, mark)})
		}
	}
	return dst
}

// frozenMessage is a Frozen node's message, naming the nearest ancestor
// that breaks a rule.
func frozenMessage(ancestor string, reason Reason) string {
	return fmt.Sprintf("ancestor %s is %s, so this node is frozen and its Kueue objects are left as they were: fix %s to unfreeze it", ancestor, reason, ancestor)
}

// Tree is a whole quota tree by node name, as the rules see it.
type Tree map[string]*v1beta1.AcceleratorQuotaSpec

// Evaluate returns every violation of every node of tree, ordered by node
// name and then Precedence, given root's high-water marks, the names of the
// ResourceFlavors that exist and the configuration. It is the rule book
// applied from scratch, for a tree that may never have been written: the
// webhook compares Evaluate before and after a write (see Diff and
// State.WhatIf), and `kubectl ome quota validate` reports it. The reducer
// applies the same rules incrementally and always agrees with it.
func Evaluate(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config) []Violation {
	env := &staticEnv{marks: marks, flavors: flavors, maxDepth: cfg.MaxTreeDepth, sums: map[string]map[Pair]Total{}}
	if cfg.Mode == events.ModeManagement {
		env.members = cfg.Members
	}
	budgets := make(map[string][]Budget, len(tree))
	for name, spec := range tree {
		budgets[name] = BudgetsOf(spec)
		if p := parentOf(name, spec); p != "" {
			if env.sums[p] == nil {
				env.sums[p] = map[Pair]Total{}
			}
			for _, b := range budgets[name] {
				env.sums[p][b.Pair] = env.sums[p][b.Pair].Add(b.Nominal)
			}
		}
	}
	places := Places(tree)
	var out []Violation
	for _, name := range sortedKeys(tree) {
		spec := tree[name]
		f := Facts{Name: name, Spec: spec, Budgets: budgets[name], Place: places[name]}
		if p := parentOf(name, spec); p != "" && tree[p] != nil {
			f.ParentRole = tree[p].Role
		}
		out = EvaluateNode(out, &f, env)
	}
	return out
}

type staticEnv struct {
	marks    map[Pair]Amount
	flavors  map[string]bool
	sums     map[string]map[Pair]Total
	maxDepth int
	members  []string // on a management plane, else nil
}

func (e *staticEnv) FlavorExists(f string) bool             { return e.flavors[f] }
func (e *staticEnv) ChildTotal(parent string, p Pair) Total { return e.sums[parent][p] }
func (e *staticEnv) HighWaterMark(p Pair) Amount            { return e.marks[p] }
func (e *staticEnv) MaxTreeDepth() int                      { return e.maxDepth }

// Fleet and MemberMark: a tree judged on its own, on a management plane,
// has marks of the fleet only (the sum over the members), so each member
// is taken to hold them all. That is enough to judge: a Proportional split
// is refused when the marks are all 0, which is when their sum is.
func (e *staticEnv) Fleet() ([]string, string, bool)    { return e.members, "", e.members != nil }
func (e *staticEnv) MemberMark(_ string, p Pair) Amount { return e.marks[p] }

// Places computes every node's place from scratch, in O(tree).
func Places(tree Tree) map[string]Place {
	places := make(map[string]Place, len(tree))
	for _, name := range sortedKeys(tree) {
		if _, ok := places[name]; ok {
			continue
		}
		// Walk up until a node whose place is known or decided here; path
		// holds the nodes walked whose place derives from their parent's.
		var path []string
		onPath := map[string]int{}
		cur := name
		for {
			if _, ok := places[cur]; ok {
				break
			}
			if i, ok := onPath[cur]; ok {
				loop := path[i:]
				for j, m := range loop {
					places[m] = cyclePlace(loop, j)
				}
				path = path[:i]
				break
			}
			if cur == v1beta1.RootName {
				places[cur] = rootPlace
				break
			}
			p := parentOf(cur, tree[cur])
			if p == "" || tree[p] == nil {
				places[cur] = missingPlace(p)
				break
			}
			onPath[cur] = len(path)
			path = append(path, cur)
			cur = p
		}
		for k := len(path) - 1; k >= 0; k-- {
			parent := cur
			if k+1 < len(path) {
				parent = path[k+1]
			}
			places[path[k]] = childPlace(parent, places[parent])
		}
	}
	return places
}
