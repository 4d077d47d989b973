package webhook

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// Inputs are what the rule book reads to judge one write: the tree as the
// API server holds it at the time of the request, and root's high-water
// marks, the ResourceFlavors and the configuration as the state has them.
type Inputs struct {
	Tree    state.Tree
	Marks   map[state.Pair]state.Amount
	Flavors map[string]bool
	Config  events.Config
}

// Verdict is the answer to one write.
type Verdict struct {
	Allowed bool
	// Code is the HTTP-style code of a denial: 403 for a rule, 400 for a
	// malformed request, 503 while the answer cannot be known yet.
	Code int32
	// Message says why a write is denied; it is empty when it is allowed.
	Message string
	// Denied are the violations that the write adds or makes worse.
	Denied []state.Violation
	// Warnings go back to the client with an admitted write; kubectl
	// prints them as "Warning: ...".
	Warnings []string
}

// maxListed bounds how many violations one denial lists.
const maxListed = 10

// Decide judges writing spec to node name, or deleting it when spec is nil,
// with the core's rule book: it evaluates the tree before and after the
// write and denies the violations the write adds (state.Diff, by node,
// reason and subject) or makes worse (a larger overrun of the same budget,
// a deeper node). CapacityExceeded never denies: it comes back as a
// warning. Deleting root or a node with children, and a root that has a
// parent or is not a Cohort, are always denied.
func Decide(in *Inputs, name string, spec *v1beta1.AcceleratorQuotaSpec) Verdict {
	if spec == nil {
		if name == v1beta1.RootName {
			return deny(403, nil, "root is the top of the quota tree and cannot be deleted while the quota manager runs: "+
				"delete the other nodes, uninstall the quota manager, then clear root's finalizer and delete it")
		}
		if kids := children(in.Tree, name); len(kids) > 0 {
			return deny(403, nil, fmt.Sprintf("%s still has children (%s): delete them, or point their spec.parentRef at another node, first",
				name, listNames(kids)))
		}
	}
	after := maps.Clone(in.Tree)
	if after == nil {
		after = state.Tree{}
	}
	if spec == nil {
		delete(after, name)
	} else {
		after[name] = spec
	}
	before := state.Evaluate(in.Tree, in.Marks, in.Flavors, in.Config)
	afterV := state.Evaluate(after, in.Marks, in.Flavors, in.Config)

	added := state.Diff(before, afterV)
	added = append(added, worsened(in.Tree, after, before, afterV)...)
	if spec != nil && name == v1beta1.RootName {
		// Root's kind is checked on every write of root, even when it was
		// already broken: root must stay a Cohort without a parent.
		have := map[state.ViolationKey]bool{}
		for _, v := range added {
			have[v.Key()] = true
		}
		for _, v := range afterV {
			if v.Node == name && v.Reason == state.ReasonNodeKindInvalid && !have[v.Key()] {
				added = append(added, v)
			}
		}
	}
	var denied []state.Violation
	for _, v := range added {
		if v.Reason != state.ReasonCapacityExceeded && v.Reason != state.ReasonFrozen {
			denied = append(denied, v)
		}
	}
	var warnings []string
	for _, v := range afterV {
		if v.Node == name && v.Reason == state.ReasonCapacityExceeded {
			warnings = append(warnings, fmt.Sprintf("%s: %s. Admitted anyway: the node reports CapacityExceeded, and stays frozen, until it fits", name, v.Message))
		}
	}
	if len(denied) == 0 {
		return Verdict{Allowed: true, Warnings: warnings}
	}
	// The written node's own violations first: they are the ones to fix.
	slices.SortStableFunc(denied, func(a, b state.Violation) int {
		return boolRank(a.Node != name) - boolRank(b.Node != name)
	})
	return deny(403, denied, violationsMessage(denied))
}

func deny(code int32, denied []state.Violation, msg string) Verdict {
	return Verdict{Code: code, Message: msg, Denied: denied}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// violationsMessage names the node of each violation before the rule
// book's message, unless the message starts with it already (as
// ContainmentViolated's does), and joins them with "; ".
func violationsMessage(vs []state.Violation) string {
	lines := make([]string, 0, min(len(vs), maxListed)+1)
	for i, v := range vs {
		if i == maxListed {
			lines = append(lines, fmt.Sprintf("and %d more", len(vs)-maxListed))
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

// parentOf is the parent a node's place follows, as the rule book reads
// it: none for root, whatever its spec says.
func parentOf(name string, spec *v1beta1.AcceleratorQuotaSpec) string {
	if name == v1beta1.RootName || spec == nil || spec.ParentRef == nil {
		return ""
	}
	return spec.ParentRef.Name
}

// children lists the nodes of tree whose parentRef names parent, by name.
func children(tree state.Tree, parent string) []string {
	var out []string
	for n, spec := range tree {
		if n != parent && parentOf(n, spec) == parent {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func listNames(names []string) string {
	if len(names) > maxListed {
		return strings.Join(names[:maxListed], ", ") + fmt.Sprintf(" and %d more", len(names)-maxListed)
	}
	return strings.Join(names, ", ")
}

// worsened returns the violations of after that were already in before by
// key but are larger now: a Cohort whose children exceed its budget for a
// pair by more, or a node too deep that sits deeper. The key alone says a
// write that shrinks an overrun is no worse; the amounts say one that grows
// it is.
func worsened(beforeTree, afterTree state.Tree, before, after []state.Violation) []state.Violation {
	prev := make(map[state.ViolationKey]bool, len(before))
	for _, v := range before {
		prev[v.Key()] = true
	}
	var out []state.Violation
	var sums [2]map[string]map[state.Pair]state.Amount
	var places [2]map[string]state.Place
	for _, v := range after {
		if !prev[v.Key()] {
			continue
		}
		switch v.Reason {
		case state.ReasonContainmentViolated:
			if sums[0] == nil {
				sums[0], sums[1] = childSums(beforeTree), childSums(afterTree)
			}
			ob, okb := overrun(beforeTree, sums[0], v)
			oa, oka := overrun(afterTree, sums[1], v)
			if okb && oka && oa > ob {
				out = append(out, v)
			}
		case state.ReasonDepthExceeded:
			if places[0] == nil {
				places[0], places[1] = state.Places(beforeTree), state.Places(afterTree)
			}
			if places[1][v.Node].Depth > places[0][v.Node].Depth {
				out = append(out, v)
			}
		}
	}
	return out
}

// childSums sums the children's nominal amounts per parent and pair.
func childSums(tree state.Tree) map[string]map[state.Pair]state.Amount {
	sums := map[string]map[state.Pair]state.Amount{}
	for n, spec := range tree {
		p := parentOf(n, spec)
		if p == "" {
			continue
		}
		if sums[p] == nil {
			sums[p] = map[state.Pair]state.Amount{}
		}
		for _, b := range state.BudgetsOf(spec) {
			sums[p][b.Pair] += b.Nominal
		}
	}
	return sums
}

// overrun is how far the children of v's node exceed its budget for the
// pair that is v's subject.
func overrun(tree state.Tree, sums map[string]map[state.Pair]state.Amount, v state.Violation) (state.Amount, bool) {
	spec := tree[v.Node]
	if spec == nil {
		return 0, false
	}
	for _, b := range state.BudgetsOf(spec) {
		if b.Pair.String() == v.Subject {
			return sums[v.Node][b.Pair] - b.Nominal, true
		}
	}
	return 0, false
}
