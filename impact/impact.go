package impact

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/kueuesim"
	"ome.io/quota-manager/state"
)

// Report is the impact of a change. Its field names are part of the
// plugin's report format (kubectl-ome.ome.io/v1alpha1).
type Report struct {
	// Nodes are the nodes whose budgets, place or state change.
	Nodes []NodeChange `json:"nodes,omitempty"`
	// AboveBudget are, per team and pair, admitted usage that the change
	// leaves above the team's budget (or more above it than before), with
	// the Workloads that make it up in the order Kueue's preemption takes
	// them.
	AboveBudget []Excess `json:"aboveBudget,omitempty"`
	// Admits are the pending Workloads that Kueue admits once the change
	// is applied and did not before, with what each preempts.
	Admits []Admission `json:"admits,omitempty"`
	// Claims are the lenders' claims, in the order simulated: each
	// ClusterQueue that uses less than its nominal quota of a pair the
	// change touches claims the rest.
	Claims []Claim `json:"claims,omitempty"`
	// NotReclaimed are the Workloads that borrow, on a pair the change
	// touches, and that no claim preempts, with why.
	NotReclaimed []Spared `json:"notReclaimed,omitempty"`
	// Members will hold, on a management plane, the impact on each
	// member cluster; empty on a workload cluster.
	Members []MemberReport `json:"members,omitempty"`
	// Limits say what the report could not judge, and why.
	Limits []string `json:"limits,omitempty"`
}

// NodeChange is one node's change.
type NodeChange struct {
	Node string `json:"node"`
	Role string `json:"role"`
	// Change is Created, Updated or Deleted.
	Change string `json:"change"`
	// Kueue says what happens to the node's Kueue objects: Written (the
	// manager writes them from the new spec), Held (the node is not Ready
	// and they stay as they are), Deleted, Kept (a deleted team's
	// ClusterQueue, which Kueue keeps until its admitted Workloads end),
	// or None (nothing is written while no namespace is enrolled).
	Kueue string `json:"kueue"`
	// State is the node's state after the change when it changes.
	State   string         `json:"state,omitempty"`
	Budgets []BudgetChange `json:"budgets,omitempty"`
}

// BudgetChange is one pair of a node's budgets, before and after.
type BudgetChange struct {
	Resource string `json:"resource"`
	Flavor   string `json:"flavor"`
	// Nominal, BorrowingLimit and LendingLimit are "" where unset.
	Nominal        Change `json:"nominal"`
	BorrowingLimit Change `json:"borrowingLimit"`
	LendingLimit   Change `json:"lendingLimit"`
	// Admitted is a team's admitted usage, AboveBudget the part of it
	// above the new budget.
	Admitted    string `json:"admitted,omitempty"`
	AboveBudget string `json:"aboveBudget,omitempty"`
}

// Change is an amount before and after.
type Change struct {
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
}

// Excess is a team's admitted usage of a pair above its new budget.
type Excess struct {
	Team     string `json:"team"`
	Resource string `json:"resource"`
	Flavor   string `json:"flavor"`
	Admitted string `json:"admitted"`
	// Budget is nominal plus borrowingLimit; Above the part of Admitted
	// above it, AboveBefore the same under the old budget.
	Nominal        string `json:"nominal"`
	BorrowingLimit string `json:"borrowingLimit,omitempty"`
	Budget         string `json:"budget"`
	Above          string `json:"above"`
	AboveBefore    string `json:"aboveBefore,omitempty"`
	// Message is the rule book's wording, as the webhook warns.
	Message string `json:"message"`
	// Workloads make up the excess, in the order Kueue would preempt
	// them; absent when the Workloads are not known.
	Workloads []Workload `json:"workloads,omitempty"`
}

// Workload is one Kueue Workload.
type Workload struct {
	Namespace    string `json:"namespace,omitempty"`
	Name         string `json:"name"`
	ClusterQueue string `json:"clusterQueue"`
	Priority     int64  `json:"priority"`
	// AdmittedAt is when its quota was reserved.
	AdmittedAt *metav1.Time `json:"admittedAt,omitempty"`
	// Usage is "resource@flavor=amount", comma-separated.
	Usage string `json:"usage"`
	// Reason is Kueue's reason for a preemption.
	Reason string `json:"reason,omitempty"`
	// Claim is, for a preemption, the lender's claim that made it, from 1.
	Claim int `json:"claim,omitempty"`
	// ReclaimedBefore: without the change, the same claims would preempt
	// it too.
	ReclaimedBefore bool `json:"reclaimedBefore,omitempty"`
}

// Admission is a pending Workload that the change lets in.
type Admission struct {
	Workload Workload   `json:"workload"`
	Preempts []Workload `json:"preempts,omitempty"`
}

// Claim is a lender's work arriving for its unused nominal quota of a
// pair, as Workloads of Size (one Workload of Amount when Size is
// absent), at Priority.
type Claim struct {
	Team     string `json:"team"`
	Resource string `json:"resource"`
	Flavor   string `json:"flavor"`
	Amount   string `json:"amount"`
	Size     string `json:"size,omitempty"`
	Priority int64  `json:"priority"`
	// Admitted is how much of Amount Kueue admits; Waits why the rest
	// waits.
	Admitted string `json:"admitted"`
	Waits    string `json:"waits,omitempty"`
	// Preempts are the Workloads evicted for it, claim by claim, each
	// claim's in the order Kueue considers its candidates.
	Preempts []Workload `json:"preempts,omitempty"`
	// Unsure, when set, says why the simulation stops at this claim's
	// Workload number StoppedAt: it would preempt a Workload that an
	// earlier one preempted and that was taken as admitted again. When
	// Kueue admits a preempted Workload again is its requeueing's timing,
	// which the report does not know; Admitted and Preempts cover the
	// Workloads before StoppedAt, and no later claim is listed.
	Unsure    string `json:"unsure,omitempty"`
	StoppedAt int    `json:"stoppedAt,omitempty"`
}

// Spared is a borrowing Workload that no claim preempts.
type Spared struct {
	Workload Workload `json:"workload"`
	Why      string   `json:"why"`
}

// MemberReport is the impact on one member cluster of a management plane:
// the share of each budget that moves there, and the member's admitted
// usage above its new share.
type MemberReport struct {
	Cluster string        `json:"cluster"`
	Shares  []ShareChange `json:"shares,omitempty"`
	// AboveBudget is the member's admitted usage above its new shares,
	// from what the member reports.
	AboveBudget []Excess `json:"aboveBudget,omitempty"`
}

// ShareChange is one team's share of a pair on a member, before and after.
type ShareChange struct {
	Team     string `json:"team"`
	Resource string `json:"resource"`
	Flavor   string `json:"flavor"`
	Share    Change `json:"share"`
}

// Harmful says whether the change leaves admitted work above budget or
// lets Kueue evict Workloads that it would not evict without the change:
// the plugin's exit status 3.
func (r *Report) Harmful() bool {
	if len(r.AboveBudget) > 0 {
		return true
	}
	for _, m := range r.Members {
		if len(m.AboveBudget) > 0 {
			return true
		}
	}
	for _, a := range r.Admits {
		for _, w := range a.Preempts {
			if !w.ReclaimedBefore {
				return true
			}
		}
	}
	for _, c := range r.Claims {
		for _, w := range c.Preempts {
			if !w.ReclaimedBefore {
				return true
			}
		}
	}
	return false
}

// ClaimOptions shape the lenders' claims.
type ClaimOptions struct {
	// Priority of the claims' Workloads.
	Priority int64
	// Size of each claim's Workloads, in each pair's resource; zero: one
	// Workload of the whole unused nominal.
	Size resource.Quantity
}

// Input is what a report is computed from.
type Input struct {
	// Before and After are the core's state without and with the change.
	Before, After *state.State
	// Settings are the manager's enrolled namespaces and cover resources.
	Settings Settings
	// Live are the Kueue objects as they are, before the change;
	// LocalQueues map "namespace/name" to a ClusterQueue.
	Live        kueuesim.Objects
	LocalQueues map[string]string
	// Workloads are Kueue's Workloads; with Workloads false (a replay)
	// the report holds amounts only.
	Workloads     []kueue.Workload
	WithWorkloads bool
	Claims        ClaimOptions
	// Now stands for the clock, for Kueue's reads of it.
	Now time.Time
}

// Compute computes the report.
func Compute(in Input) (*Report, error) {
	rep := &Report{}
	changed := changedNodes(in.Before, in.After)
	if in.Before.Config().Mode == events.ModeManagement {
		rep.Members = members(in.Before, in.After)
	}
	admitted := map[string]bool{}
	for _, nv := range in.Before.Nodes() {
		for _, u := range in.Before.TeamUsage(nv.Name) {
			if u.Admitted.Sign() > 0 {
				admitted[nv.Name] = true
			}
		}
	}
	afterObjs, afterLQ, fates, err := afterObjects(in.Live, in.LocalQueues, in.Before, in.After, in.Settings, admitted, in.Now)
	if err != nil {
		return nil, err
	}
	if len(in.Settings.Enrolled) == 0 {
		rep.Limits = append(rep.Limits, "no namespace is enrolled: the manager writes nothing to Kueue, so the change moves no quota")
	}
	for _, name := range changed {
		rep.Nodes = append(rep.Nodes, nodeChange(in, name, fates[name]))
	}
	touched := touchedPairs(in.Before, in.After, changed)

	var beforeSim, afterSim *kueuesim.Sim
	if in.WithWorkloads {
		beforeSim = kueuesim.New(in.Live, workloadsOf(in.Workloads, in.LocalQueues), in.Now)
		afterSim = kueuesim.New(afterObjs, workloadsOf(in.Workloads, afterLQ), in.Now)
	} else {
		rep.Limits = append(rep.Limits, "the Workloads are not known: the report holds each team's admitted totals, not which Workloads make them up, nor what Kueue reclaims or admits")
	}
	// Above budget: teams whose Kueue objects are written anew.
	for _, name := range changed {
		nb, okb := in.Before.Node(name)
		na, oka := in.After.Node(name)
		if !oka || !fates[name].written || na.Spec.Role != v1beta1.RoleClusterQueue {
			continue
		}
		var oldSpec *v1beta1.AcceleratorQuotaSpec
		if okb {
			oldSpec = nb.Spec
		}
		usage := in.After.TeamUsage(name)
		before := map[state.Pair]state.Amount{}
		for _, e := range state.AboveBudget(oldSpec, usage) {
			before[e.Pair] = e.Above
		}
		for _, e := range state.AboveBudget(na.Spec, usage) {
			if e.Above <= before[e.Pair] {
				continue
			}
			ex := Excess{Team: name, Resource: e.Resource, Flavor: e.Flavor, Admitted: e.Admitted.String(), Nominal: e.Nominal.String(),
				Budget: e.Budget.String(), Above: e.Above.String(), Message: e.Message(name)}
			if e.BorrowingLimit > 0 {
				ex.BorrowingLimit = e.BorrowingLimit.String()
			}
			if b := before[e.Pair]; b > 0 {
				ex.AboveBefore = b.String()
			}
			if afterSim != nil {
				fr := frOf(e.Pair)
				limit := limitOf(na.Spec, e.Pair)
				for _, w := range afterSim.Excess(name, fr, limit) {
					ex.Workloads = append(ex.Workloads, workloadOf(w))
				}
			}
			rep.AboveBudget = append(rep.AboveBudget, ex)
		}
	}
	if afterSim == nil {
		return rep, nil
	}
	borrowing := borrowers(afterSim, afterObjs, touched)
	beforeRun, err := run(beforeSim, in.Live, touched, in.Claims)
	if err != nil {
		return nil, err
	}
	afterRun, err := run(afterSim, afterObjs, touched, in.Claims)
	if err != nil {
		return nil, err
	}
	// What happens without the change: the pending Workloads Kueue
	// admits anyway, and every Workload preempted, by them or by claims.
	reclaimedBefore := map[string]bool{}
	for _, e := range beforeRun.events {
		if e.Kind == kueuesim.Preempted {
			reclaimedBefore[e.W.Key()] = true
		}
	}
	admittedBefore := map[string]bool{}
	for _, e := range beforeRun.pending {
		if e.Kind == kueuesim.Admitted {
			admittedBefore[e.W.Key()] = true
		}
	}
	preempted := map[string]bool{}
	byAdmission := map[*kueuesim.Workload]int{}
	for _, e := range afterRun.pending {
		switch {
		case e.Kind == kueuesim.Admitted && !admittedBefore[e.W.Key()]:
			byAdmission[e.W] = len(rep.Admits)
			rep.Admits = append(rep.Admits, Admission{Workload: workloadOf(e.W)})
		case e.Kind == kueuesim.Preempted:
			preempted[e.W.Key()] = true
			w := workloadOf(e.W)
			w.Reason, w.ReclaimedBefore = e.Reason, reclaimedBefore[e.W.Key()]
			i, ok := byAdmission[e.By]
			if !ok {
				i = len(rep.Admits)
				byAdmission[e.By] = i
				rep.Admits = append(rep.Admits, Admission{Workload: workloadOf(e.By)})
			}
			rep.Admits[i].Preempts = append(rep.Admits[i].Preempts, w)
		}
	}
	for _, c := range afterRun.claims {
		for i := range c.Preempts {
			key := c.Preempts[i].Namespace + "/" + c.Preempts[i].Name
			preempted[key] = true
			c.Preempts[i].ReclaimedBefore = reclaimedBefore[key]
		}
		rep.Claims = append(rep.Claims, c)
	}
	if afterRun.stopped || beforeRun.stopped {
		rep.Limits = append(rep.Limits, "the lenders' claims are simulated up to one that would preempt a Workload a second time (its note says which): when Kueue admits a preempted Workload again is its own timing, so later reclaims are not listed, nor the borrowing Workloads no claim preempts")
		borrowing = nil
	}
	reasons := newSpareReasons(afterSim, afterRun.claims)
	for _, w := range borrowing {
		if preempted[w.Key()] {
			continue
		}
		rep.NotReclaimed = append(rep.NotReclaimed, Spared{Workload: workloadOf(w), Why: reasons.why(w)})
	}
	for _, key := range afterSim.Unplaced {
		rep.Limits = append(rep.Limits, fmt.Sprintf("Workload %s names a ClusterQueue that does not exist: Kueue does not count it", key))
	}
	return rep, nil
}

// changedNodes are the nodes created, deleted, written with another spec,
// or whose state changes, by name.
func changedNodes(before, after *state.State) []string {
	names := map[string]bool{}
	for _, nv := range before.Nodes() {
		na, ok := after.Node(nv.Name)
		if !ok || !reflect.DeepEqual(nv.Spec, na.Spec) || nv.Phase != na.Phase || nv.Reason != na.Reason {
			names[nv.Name] = true
		}
	}
	for _, nv := range after.Nodes() {
		if _, ok := before.Node(nv.Name); !ok {
			names[nv.Name] = true
		}
	}
	return slices.Sorted(maps.Keys(names))
}

func nodeChange(in Input, name string, f fate) NodeChange {
	nb, okb := in.Before.Node(name)
	na, oka := in.After.Node(name)
	nc := NodeChange{Node: name, Change: "Updated"}
	var oldSpec, newSpec *v1beta1.AcceleratorQuotaSpec
	switch {
	case !okb:
		nc.Change, newSpec = "Created", na.Spec
	case !oka:
		nc.Change, oldSpec = "Deleted", nb.Spec
	default:
		oldSpec, newSpec = nb.Spec, na.Spec
	}
	role := cmp.Or(specRole(newSpec), specRole(oldSpec))
	nc.Role = string(role)
	switch {
	case len(in.Settings.Enrolled) == 0:
		nc.Kueue = "None"
	case f.held:
		nc.Kueue = "Held"
	case f.deleted && admittedAny(in.Before, name):
		nc.Kueue = "Kept"
	case f.deleted:
		nc.Kueue = "Deleted"
	default:
		nc.Kueue = "Written"
	}
	if oka && (!okb || nb.Phase != na.Phase || nb.Reason != na.Reason) {
		nc.State = string(na.Phase)
		if !na.Ready() {
			nc.State += " (" + string(na.Reason) + ": " + na.Message + ")"
		}
	}
	type amounts struct{ nominal, borrowing, lending string }
	read := func(spec *v1beta1.AcceleratorQuotaSpec) map[state.Pair]amounts {
		out := map[state.Pair]amounts{}
		if spec == nil {
			return out
		}
		for _, b := range spec.Budgets {
			a := amounts{nominal: b.Nominal.String()}
			if b.BorrowingLimit != nil {
				a.borrowing = b.BorrowingLimit.String()
			}
			if b.LendingLimit != nil {
				a.lending = b.LendingLimit.String()
			}
			out[state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}] = a
		}
		return out
	}
	olds, news := read(oldSpec), read(newSpec)
	pairs := map[state.Pair]bool{}
	for p := range olds {
		pairs[p] = true
	}
	for p := range news {
		pairs[p] = true
	}
	usage := map[state.Pair]string{}
	if role == v1beta1.RoleClusterQueue {
		for _, u := range in.After.TeamUsage(name) {
			p := state.Pair{Resource: u.Resource, Flavor: u.Flavor}
			if pairs[p] || u.Admitted.Sign() > 0 {
				usage[p] = u.Admitted.String()
				pairs[p] = true
			}
		}
	}
	above := map[state.Pair]string{}
	if role == v1beta1.RoleClusterQueue && newSpec != nil {
		for _, e := range state.AboveBudget(newSpec, in.After.TeamUsage(name)) {
			above[e.Pair] = e.Above.String()
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(pairs), state.Pair.Compare) {
		o, n := olds[p], news[p]
		nc.Budgets = append(nc.Budgets, BudgetChange{Resource: p.Resource, Flavor: p.Flavor,
			Nominal: Change{o.nominal, n.nominal}, BorrowingLimit: Change{o.borrowing, n.borrowing}, LendingLimit: Change{o.lending, n.lending},
			Admitted: usage[p], AboveBudget: above[p]})
	}
	return nc
}

func specRole(spec *v1beta1.AcceleratorQuotaSpec) v1beta1.Role {
	if spec == nil {
		return ""
	}
	return spec.Role
}

func admittedAny(s *state.State, team string) bool {
	for _, u := range s.TeamUsage(team) {
		if u.Admitted.Sign() > 0 {
			return true
		}
	}
	return false
}

// touchedPairs are the pairs the change can move quota on: every pair
// budgeted by a changed node, before and after, and by the teams below a
// changed Cohort (a Cohort's budget is a guardrail, not quota, but moving
// it moves its teams' quota with it).
func touchedPairs(before, after *state.State, changed []string) []kueuesim.FR {
	set := map[state.Pair]bool{}
	var walk func(s *state.State, name string)
	walk = func(s *state.State, name string) {
		nv, ok := s.Node(name)
		if !ok {
			return
		}
		for _, b := range nv.Spec.Budgets {
			set[state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}] = true
		}
		for _, ch := range nv.Children {
			walk(s, ch)
		}
	}
	for _, name := range changed {
		walk(before, name)
		walk(after, name)
	}
	var out []kueuesim.FR
	for _, p := range slices.SortedFunc(maps.Keys(set), state.Pair.Compare) {
		out = append(out, frOf(p))
	}
	return out
}

// limitOf is a team's budget of p in Kueue's units: nominal plus
// borrowingLimit.
func limitOf(spec *v1beta1.AcceleratorQuotaSpec, p state.Pair) int64 {
	for _, b := range spec.Budgets {
		if b.ResourceName == p.Resource && b.ResourceFlavor == p.Flavor {
			v := kueuesim.Value(p.Resource, b.Nominal)
			if b.BorrowingLimit != nil {
				v += kueuesim.Value(p.Resource, *b.BorrowingLimit)
			}
			return v
		}
	}
	return 0
}

// workloadsOf reads the Workload objects for one simulation (each
// simulation changes its own copies). A pending Workload's ClusterQueue
// is its LocalQueue's.
func workloadsOf(objs []kueue.Workload, lqs map[string]string) []*kueuesim.Workload {
	out := make([]*kueuesim.Workload, 0, len(objs))
	for i := range objs {
		w, st := kueuesim.FromAPI(&objs[i])
		switch st {
		case kueuesim.Holding:
			out = append(out, w)
		case kueuesim.Waiting:
			if cq, ok := lqs[w.Namespace+"/"+w.LocalQueue]; ok {
				w.Queue = cq
				out = append(out, w)
			}
		}
	}
	return out
}

func workloadOf(w *kueuesim.Workload) Workload {
	out := Workload{Namespace: w.Namespace, Name: w.Name, ClusterQueue: w.Queue, Priority: w.Priority}
	if w.Hypothetical {
		out.Namespace = ""
	}
	if w.Admitted || len(w.Usage) > 0 {
		out.Usage = joinUsage(w.Usage)
	} else {
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(w.Requests())) {
			parts = append(parts, r+"="+quantity(r, w.Requests()[r]))
		}
		out.Usage = strings.Join(parts, ",")
	}
	if !w.ReservedAt.IsZero() && !w.Hypothetical {
		t := metav1.NewTime(w.ReservedAt)
		out.AdmittedAt = &t
	}
	return out
}

// borrowers are the admitted Workloads of ClusterQueues that use more
// than their nominal quota of a touched pair right after the change,
// using it: those a lender can reclaim.
func borrowers(sim *kueuesim.Sim, objs kueuesim.Objects, touched []kueuesim.FR) []*kueuesim.Workload {
	var out []*kueuesim.Workload
	for _, cq := range objs.ClusterQueues {
		q := sim.Queue(cq.Name)
		if q == nil {
			continue
		}
		var frs []kueuesim.FR
		for _, fr := range touched {
			if q.Usage(fr) > q.Quota(fr).Nominal {
				frs = append(frs, fr)
			}
		}
		if len(frs) == 0 {
			continue
		}
		for _, w := range q.Admitted() {
			for _, fr := range frs {
				if w.UsageOf(fr) > 0 {
					out = append(out, w)
					break
				}
			}
		}
	}
	return out
}

// maxPieces bounds the Workloads one claim is split into.
const maxPieces = 256

// runResult is one simulation: pending Workloads first, then the claims.
type runResult struct {
	pending []kueuesim.Event
	events  []kueuesim.Event
	claims  []Claim
	// stopped: the claims stopped at a second preemption (Claim.Unsure).
	stopped bool
}

// run lets Kueue admit the pending Workloads, then brings each lender's
// claims, one lender and pair after another in name order: every
// ClusterQueue using less than its nominal quota of a touched pair claims
// the rest, as one Workload or as Workloads of opts.Size, each submitted
// once the previous one settled. A preempted Workload goes back to its
// queue and the simulation admits it again as soon as room frees; Kueue
// does so once its eviction is done and it is requeued, at a time of its
// own. Up to a claim that would preempt such a Workload again, that
// timing changes nothing the report names; from there on it may, so the
// claims stop there (Claim.Unsure).
func run(sim *kueuesim.Sim, objs kueuesim.Objects, touched []kueuesim.FR, opts ClaimOptions) (*runResult, error) {
	res := &runResult{}
	evs, err := sim.Run()
	if err != nil {
		return nil, err
	}
	res.pending, res.events = evs, append(res.events, evs...)
	// The Workloads preempted so far, and by what.
	preemptedBy := map[*kueuesim.Workload]string{}
	for _, e := range evs {
		if e.Kind == kueuesim.Preempted {
			preemptedBy[e.W] = "the admission of " + e.By.Key()
		}
	}
	for _, cq := range objs.ClusterQueues {
		q := sim.Queue(cq.Name)
		if q == nil || q.Inactive != "" {
			continue
		}
		for _, fr := range touched {
			unused := q.Quota(fr).Nominal - q.Usage(fr)
			if unused <= 0 {
				continue
			}
			c := Claim{Team: cq.Name, Resource: fr.Resource, Flavor: fr.Flavor, Amount: quantity(fr.Resource, unused), Priority: opts.Priority}
			size := unused
			if opts.Size.Sign() > 0 {
				// At most maxPieces Workloads per claim: a smaller size
				// grows to fit.
				size = max(1, kueuesim.Value(fr.Resource, opts.Size), (unused+maxPieces-1)/maxPieces)
				c.Size = quantity(fr.Resource, size)
			}
			var got int64
			for n := 1; unused > 0; n++ {
				piece := min(size, unused)
				unused -= piece
				w := sim.Claim(cq.Name, fmt.Sprintf("%s-claim-%d", cq.Name, n), fr, piece, opts.Priority)
				if err := sim.Submit(w); err != nil {
					return nil, err
				}
				evs, err := sim.Run()
				if err != nil {
					return nil, err
				}
				for _, e := range evs {
					if by, again := preemptedBy[e.W]; again && e.Kind == kueuesim.Preempted {
						c.Unsure = fmt.Sprintf("claim %d would preempt %s again, which %s preempted; the simulation took it as admitted again once room freed, and when Kueue does so depends on its requeueing, so what this claim and later ones reclaim is not simulated", n, e.W.Key(), by)
						c.StoppedAt, res.stopped = n, true
						c.Admitted = quantity(fr.Resource, got)
						res.claims = append(res.claims, c)
						return res, nil
					}
				}
				res.events = append(res.events, evs...)
				for _, e := range evs {
					if e.Kind == kueuesim.Preempted && e.By == w {
						p := workloadOf(e.W)
						p.Reason, p.Claim = e.Reason, n
						c.Preempts = append(c.Preempts, p)
						preemptedBy[e.W] = fmt.Sprintf("claim %d of %s", n, cq.Name)
					}
				}
				if w.Admitted {
					got += piece
					continue
				}
				a, _ := sim.Nominate(w)
				c.Waits = fmt.Sprintf("claim %d waits: %s", n, waitReason(q, a))
				// The lender's later claims would queue behind it.
				sim.Withdraw(w)
				break
			}
			c.Admitted = quantity(fr.Resource, got)
			res.claims = append(res.claims, c)
		}
	}
	return res, nil
}

func waitReason(q *kueuesim.Queue, a kueuesim.Assignment) string {
	switch {
	case a.Mode == kueuesim.Preempt && q.Preemption.ReclaimWithinCohort == kueue.PreemptionPolicyNever:
		return fmt.Sprintf("the quota is in use elsewhere and ClusterQueue %s's preemption.reclaimWithinCohort is Never, so Kueue reclaims nothing for it", q.Name)
	case a.Mode == kueuesim.Preempt:
		return fmt.Sprintf("the quota is in use elsewhere and no Workload there may be preempted under ClusterQueue %s's policy (reclaimWithinCohort %s)", q.Name, q.Preemption.ReclaimWithinCohort)
	case len(a.Reasons) > 0:
		return a.Reasons[len(a.Reasons)-1]
	}
	return a.Mode.String()
}

// spareReasons says why no claim preempts a borrowing Workload, by its
// priority, the claims left waiting read once.
type spareReasons struct {
	sim     *kueuesim.Sim
	waiting []Claim
	byPrio  map[int64]string
}

func newSpareReasons(sim *kueuesim.Sim, claims []Claim) *spareReasons {
	r := &spareReasons{sim: sim, byPrio: map[int64]string{}}
	for _, c := range claims {
		if c.Waits != "" {
			r.waiting = append(r.waiting, c)
		}
	}
	return r
}

func (r *spareReasons) why(w *kueuesim.Workload) string {
	if len(r.waiting) == 0 {
		return "not needed: every lender's claim is admitted without it"
	}
	if why, ok := r.byPrio[w.Priority]; ok {
		return why
	}
	var never, priority []string
	for _, c := range r.waiting {
		q := r.sim.Queue(c.Team)
		switch q.Preemption.ReclaimWithinCohort {
		case kueue.PreemptionPolicyNever:
			never = append(never, c.Team)
		case kueue.PreemptionPolicyLowerPriority, kueue.PreemptionPolicyLowerOrNewerEqualPriority:
			if w.Priority >= c.Priority {
				priority = append(priority, c.Team)
			}
		}
	}
	why := "Kueue's preemption does not pick it: the waiting claims fit without it, or their ClusterQueues may not borrow to reach it"
	switch {
	case len(never) == len(r.waiting):
		why = fmt.Sprintf("the waiting lenders' ClusterQueues (%s) never reclaim: preemption.reclaimWithinCohort is Never", strings.Join(slices.Compact(never), ", "))
	case len(priority) > 0:
		why = fmt.Sprintf("its priority %d is not below the claims' of %s, whose reclaimWithinCohort preempts lower priorities only", w.Priority, strings.Join(slices.Compact(priority), ", "))
	}
	r.byPrio[w.Priority] = why
	return why
}

// members is, on a management plane, what the change moves on each member
// cluster: each team's share that changes there, and the member's
// admitted usage of the team's copy (as the member last reported it)
// above its new share, nominal plus its part of the fleet's
// borrowingLimit; usage the old share already left above is not counted
// again. A share goes down on a member at once and up once the lowerings
// it needs are read back (docs/manager.md): the shares are where the
// plane takes each copy, not the order.
func members(before, after *state.State) []MemberReport {
	byCluster := map[string]*MemberReport{}
	at := func(c string) *MemberReport {
		if byCluster[c] == nil {
			byCluster[c] = &MemberReport{Cluster: c}
		}
		return byCluster[c]
	}
	teams := map[string]bool{}
	for _, s := range []*state.State{before, after} {
		for _, nv := range s.Nodes() {
			if nv.Spec.Role == v1beta1.RoleClusterQueue {
				teams[nv.Name] = true
			}
		}
	}
	for _, team := range slices.Sorted(maps.Keys(teams)) {
		old, cur := before.MemberShares(team), after.MemberShares(team)
		usage := map[string]map[state.Pair]state.Amount{}
		for _, u := range before.MemberUsage(team) {
			if usage[u.Cluster] == nil {
				usage[u.Cluster] = map[state.Pair]state.Amount{}
			}
			usage[u.Cluster][u.Pair] = u.Admitted
		}
		clusters := map[string]bool{}
		for c := range old {
			clusters[c] = true
		}
		for c := range cur {
			clusters[c] = true
		}
		for c := range usage {
			clusters[c] = true
		}
		for _, c := range slices.Sorted(maps.Keys(clusters)) {
			pairs := map[state.Pair]bool{}
			for p := range old[c] {
				pairs[p] = true
			}
			for p := range cur[c] {
				pairs[p] = true
			}
			for p := range usage[c] {
				pairs[p] = true
			}
			for _, p := range slices.SortedFunc(maps.Keys(pairs), state.Pair.Compare) {
				o, n := old[c][p], cur[c][p]
				if o.Nominal != n.Nominal {
					at(c).Shares = append(at(c).Shares, ShareChange{Team: team, Resource: p.Resource, Flavor: p.Flavor,
						Share: Change{Old: o.Nominal.String(), New: n.Nominal.String()}})
				}
				admitted := usage[c][p]
				budget, was := n.Nominal+n.Borrow, o.Nominal+o.Borrow
				if admitted <= budget || admitted-budget <= max(admitted-was, 0) {
					continue
				}
				ex := Excess{Team: team, Resource: p.Resource, Flavor: p.Flavor, Admitted: admitted.String(), Nominal: n.Nominal.String(),
					Budget: budget.String(), Above: (admitted - budget).String(),
					Message: fmt.Sprintf("%s on %s: admitted %s of %s is above its new share of %s", team, c, admitted, p, budget)}
				if n.Borrow > 0 {
					ex.BorrowingLimit = n.Borrow.String()
				}
				if admitted > was {
					ex.AboveBefore = (admitted - was).String()
				}
				at(c).AboveBudget = append(at(c).AboveBudget, ex)
			}
		}
	}
	var out []MemberReport
	for _, c := range slices.Sorted(maps.Keys(byCluster)) {
		out = append(out, *byCluster[c])
	}
	return out
}
