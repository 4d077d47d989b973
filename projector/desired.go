package projector

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueac "sigs.k8s.io/kueue/client-go/applyconfiguration/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// Output is the projection of one Input.
type Output struct {
	// Materialize is false while no namespace is enrolled: then nothing is
	// applied and nothing is swept.
	Materialize bool
	// Desired Kueue objects of nodes that are Ready, sorted by name (and
	// namespace). Objects of other nodes are held: see Held.
	Cohorts       []*kueueac.CohortApplyConfiguration
	ClusterQueues []*kueueac.ClusterQueueApplyConfiguration
	LocalQueues   []*kueueac.LocalQueueApplyConfiguration
	// Held names the nodes that exist but are not Ready: their Kueue
	// objects, whatever they are, are neither written nor swept.
	Held map[string]bool
	// Statuses is every node's status, its conditions dated (stamp).
	Statuses map[string]*v1beta1.AcceleratorQuotaStatus
}

func labels() map[string]string {
	return map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}
}

// Project computes the desired objects and statuses.
func Project(in Input) *Output {
	nodes := slices.Clone(in.Nodes)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	in.EnrolledNamespaces = Namespaces(in.EnrolledNamespaces)

	out := &Output{
		Materialize: len(in.EnrolledNamespaces) > 0,
		Held:        map[string]bool{},
		Statuses:    map[string]*v1beta1.AcceleratorQuotaStatus{},
	}
	for i := range nodes {
		out.Add(ProjectNode(&nodes[i], in))
	}
	sort.SliceStable(out.LocalQueues, func(i, j int) bool {
		a, b := out.LocalQueues[i], out.LocalQueues[j]
		if *a.Namespace != *b.Namespace {
			return *a.Namespace < *b.Namespace
		}
		return *a.Name < *b.Name
	})
	return out
}

// Add adds one node's share to the projection, its objects after those
// already there.
func (out *Output) Add(no NodeOutput) {
	if out.Held == nil {
		out.Held = map[string]bool{}
	}
	if out.Statuses == nil {
		out.Statuses = map[string]*v1beta1.AcceleratorQuotaStatus{}
	}
	out.Statuses[no.Name] = no.Status
	if no.Held {
		out.Held[no.Name] = true
	}
	if no.Cohort != nil {
		out.Cohorts = append(out.Cohorts, no.Cohort)
	}
	if no.ClusterQueue != nil {
		out.ClusterQueues = append(out.ClusterQueues, no.ClusterQueue)
	}
	out.LocalQueues = append(out.LocalQueues, no.LocalQueues...)
}

// Namespaces sorts and deduplicates enrolled namespaces, as ProjectNode
// reads them.
func Namespaces(enrolled []string) []string {
	ns := slices.Clone(enrolled)
	slices.Sort(ns)
	return slices.Compact(ns)
}

// NodeOutput is one node's share of a projection: what the shell compares
// when only that node changed.
type NodeOutput struct {
	Name string
	// Materialize is false while no namespace is enrolled.
	Materialize bool
	// Held is true for a node that is not Ready: its Kueue objects are
	// neither written nor swept.
	Held bool
	// The node's desired Kueue objects: a Cohort, or a ClusterQueue and
	// a LocalQueue per enrolled namespace (sorted); none while held or
	// while nothing is materialized.
	Cohort       *kueueac.CohortApplyConfiguration
	ClusterQueue *kueueac.ClusterQueueApplyConfiguration
	LocalQueues  []*kueueac.LocalQueueApplyConfiguration
	// Status is the node's status, its conditions dated (stamp).
	Status *v1beta1.AcceleratorQuotaStatus
}

// ProjectNode computes one node's desired objects and status. Of in it
// reads the settings and root's capacity, not Nodes (the node's outcome
// comes with n);
// in.EnrolledNamespaces must be sorted and deduplicated (Namespaces).
func ProjectNode(n *Node, in Input) NodeOutput {
	materialize := len(in.EnrolledNamespaces) > 0
	out := NodeOutput{Name: n.Name, Materialize: materialize, Held: !n.Ready, Status: ProjectStatus(n, in)}
	if !n.Ready || !materialize {
		return out
	}
	switch n.Role {
	case v1beta1.RoleCohort:
		out.Cohort = cohort(n)
	case v1beta1.RoleClusterQueue:
		out.ClusterQueue = clusterQueue(n, in.EnrolledNamespaces, in.CoverResources)
		for _, ns := range in.EnrolledNamespaces {
			out.LocalQueues = append(out.LocalQueues, localQueue(n, ns))
		}
	}
	return out
}

func cohort(n *Node) *kueueac.CohortApplyConfiguration {
	spec := kueueac.CohortSpec()
	if n.Parent != "" {
		spec.WithParentName(kueuev1beta2.CohortReference(n.Parent))
	}
	return kueueac.Cohort(n.Name).WithLabels(labels()).WithSpec(spec)
}

// clusterQueue writes a team as one resource group: every flavor the team
// has a budget on covers every resource it budgets plus the cover
// resources. A pair without a budget gets nominal 0 and borrowingLimit 0,
// so the team cannot take it from the cohort either.
func clusterQueue(n *Node, namespaces []string, cover map[string]resource.Quantity) *kueueac.ClusterQueueApplyConfiguration {
	budgets := map[state.Pair]v1beta1.Budget{}
	var accel, flavors []string
	for _, b := range n.Budgets {
		budgets[state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}] = b
		accel = append(accel, b.ResourceName)
		flavors = append(flavors, b.ResourceFlavor)
	}
	slices.Sort(accel)
	accel = slices.Compact(accel)
	slices.Sort(flavors)
	flavors = slices.Compact(flavors)
	var extra []string
	for r := range cover {
		if !slices.Contains(accel, r) {
			extra = append(extra, r)
		}
	}
	slices.Sort(extra)
	covered := append(slices.Clone(accel), extra...)

	rg := kueueac.ResourceGroup()
	for _, r := range covered {
		rg.WithCoveredResources(corev1.ResourceName(r))
	}
	zero := resource.MustParse("0")
	for _, f := range flavors {
		fq := kueueac.FlavorQuotas().WithName(kueuev1beta2.ResourceFlavorReference(f))
		for _, r := range accel {
			rq := kueueac.ResourceQuota().WithName(corev1.ResourceName(r))
			if b, ok := budgets[state.Pair{Resource: r, Flavor: f}]; ok {
				rq.WithNominalQuota(b.Nominal)
				if b.BorrowingLimit != nil {
					rq.WithBorrowingLimit(*b.BorrowingLimit)
				} else {
					rq.WithBorrowingLimit(zero)
				}
				if b.LendingLimit != nil {
					rq.WithLendingLimit(*b.LendingLimit)
				}
			} else {
				rq.WithNominalQuota(zero).WithBorrowingLimit(zero)
			}
			fq.WithResources(rq)
		}
		for _, r := range extra {
			fq.WithResources(kueueac.ResourceQuota().WithName(corev1.ResourceName(r)).WithNominalQuota(cover[r]))
		}
		rg.WithFlavors(fq)
	}
	spec := kueueac.ClusterQueueSpec().
		WithNamespaceSelector(metav1ac.LabelSelector().WithMatchExpressions(
			metav1ac.LabelSelectorRequirement().
				WithKey(corev1.LabelMetadataName).
				WithOperator(metav1.LabelSelectorOpIn).
				WithValues(namespaces...)))
	if n.Parent != "" {
		spec.WithCohortName(kueuev1beta2.CohortReference(n.Parent))
	}
	if len(flavors) > 0 {
		spec.WithResourceGroups(rg)
	}
	return kueueac.ClusterQueue(n.Name).WithLabels(labels()).WithSpec(spec)
}

func localQueue(n *Node, ns string) *kueueac.LocalQueueApplyConfiguration {
	return kueueac.LocalQueue(n.Name, ns).WithLabels(labels()).
		WithSpec(kueueac.LocalQueueSpec().WithClusterQueue(kueuev1beta2.ClusterQueueReference(n.Name)))
}

// Condition reasons and messages the projection writes.
const (
	ReasonAdmitted = "Admitted"
	ReasonFrozen   = "Frozen"
	// ReasonPending: the leader's applier has not reported on the node
	// (yet, or this replica does not lead).
	ReasonPending    = "Pending"
	MsgReady         = "node is a valid member of the quota tree"
	MsgNotDegraded   = "no invariant violated"
	MsgMaterialized  = "enforcement objects match this node's budget"
	msgPendingApply  = "enforcement objects are being written"
	msgFrozenObjects = "node is not Ready, so its enforcement objects are left as they were"
)

func cond(t string, ok bool, reason, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// ProjectStatus computes one node's status alone, as ProjectNode does
// with its objects: for the status write that follows the applier's
// outcome, which needs no objects built again.
func ProjectStatus(n *Node, in Input) *v1beta1.AcceleratorQuotaStatus {
	materialize := len(in.EnrolledNamespaces) > 0 || in.Plane
	st := &v1beta1.AcceleratorQuotaStatus{ObservedGeneration: n.Generation}
	if n.Ready {
		st.Conditions = append(st.Conditions,
			cond(v1beta1.ConditionReady, true, ReasonAdmitted, MsgReady, n.Generation),
			cond(v1beta1.ConditionDegraded, false, ReasonAdmitted, MsgNotDegraded, n.Generation))
	} else {
		st.Conditions = append(st.Conditions,
			cond(v1beta1.ConditionReady, false, n.Reason, n.Message, n.Generation),
			cond(v1beta1.ConditionDegraded, true, n.Reason, n.Message, n.Generation))
	}
	if materialize {
		st.Conditions = append(st.Conditions, materialized(n))
	}
	for i := range st.Conditions {
		stamp(&st.Conditions[i], n)
	}
	if n.Name == v1beta1.RootName {
		st.Capacity = slices.Clone(in.Capacity)
		st.Unbudgeted = slices.Clone(in.Unbudgeted)
		if in.Plane {
			st.Members = slices.Clone(in.Roster)
		}
	}
	if n.Role == v1beta1.RoleClusterQueue {
		for _, b := range n.Budgets {
			p := state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}
			u := n.Usage[p]
			st.Budgets = append(st.Budgets, v1beta1.BudgetStatus{
				ResourceName: b.ResourceName, ResourceFlavor: b.ResourceFlavor, Nominal: b.Nominal,
				Admitted: u.Admitted, Reserved: u.Reserved, Borrowed: u.Borrowed, PerCluster: perCluster(n, p),
			})
		}
	}
	if len(n.Budgets) > 0 {
		st.Summary = summary(n)
	}
	if in.Plane && n.Name != v1beta1.RootName {
		st.Clusters = append(clusters(n, in.Members), leaving(n.Name, in.Leaving, in.Origin)...)
		for i := range st.Clusters {
			if w, ok := n.Waits[st.Clusters[i].Cluster]; ok {
				st.Clusters[i].Waiting = w.String()
				since := metav1.NewTime(w.Since)
				st.Clusters[i].WaitingSince = &since
			}
		}
		if n.Holds != nil {
			st.Holds = n.Holds.DeepCopy()
		}
	}
	return st
}

// ReasonClusterUnreachable starts the status.clusters message of a member
// the plane does not hear from; kubectl ome quota status reads it.
const ReasonClusterUnreachable = "ClusterUnreachable"

// clusters is, on a plane, how each member stands for the node: the
// generations of the copy it holds, and why it holds none or is behind.
// A member is listed when it holds a copy, when the node has a share
// there, or when it does not answer.
func clusters(n *Node, members []state.MemberView) []v1beta1.ClusterStatus {
	var out []v1beta1.ClusterStatus
	for _, mv := range members {
		c, held := n.Copies[mv.Name]
		cs := v1beta1.ClusterStatus{Cluster: mv.Name, AppliedGeneration: c.Applied, MaterializedGeneration: c.Materialized}
		switch {
		case !mv.Reachable:
			cs.Message = ReasonClusterUnreachable + ": the plane does not hear from this member, so its copy stays as it was: " + mv.Message
		case !held && hasShareOn(n, mv.Name):
			cs.Message = "the member holds no copy of this node yet"
		case !held && n.Waits[mv.Name].Message == "":
			continue
		case c.Applied != n.Generation:
			cs.Message = fmt.Sprintf("the member's copy was made from generation %d of %d", c.Applied, n.Generation)
		}
		if note := state.InventoryNote(mv.Inventory); note != "" {
			// What the fleet's inventory says of the member, beside what
			// the plane sees of it.
			cs.Message = strings.TrimPrefix(cs.Message+"; ", "; ") + note
		}
		out = append(out, cs)
	}
	return out
}

// ReasonClusterLeaving starts the status.clusters message of a cluster
// that left the fleet and still holds a copy of the node.
const ReasonClusterLeaving = "ClusterLeaving"

// leaving lists the clusters that left the fleet and still hold a copy of
// node: the plane deletes it while it reaches them; one it does not reach
// keeps it until its admin releases it.
func leaving(node string, clusters []state.MemberView, origin string) []v1beta1.ClusterStatus {
	var out []v1beta1.ClusterStatus
	for _, mv := range clusters {
		i, ok := slices.BinarySearchFunc(mv.Copies, node, func(c events.MemberCopy, n string) int { return cmp.Compare(c.Node, n) })
		if !ok {
			continue
		}
		cs := v1beta1.ClusterStatus{Cluster: mv.Name, AppliedGeneration: mv.Copies[i].Applied, MaterializedGeneration: mv.Copies[i].Materialized,
			Message: ReasonClusterLeaving + ": this cluster left the fleet; the plane deletes its copy"}
		if !mv.Reachable {
			cs.Message = ReasonClusterLeaving + ": this cluster left the fleet, but the plane does not reach it to delete its copy (" + mv.Message +
				"); its cluster-admin can release the plane's copies there with kubectl ome quota release --origin " + origin
		}
		out = append(out, cs)
	}
	return out
}

func hasShareOn(n *Node, cluster string) bool {
	for _, sp := range n.Splits {
		for _, sh := range sp.Shares {
			if sh.Cluster == cluster && sh.Amount > 0 {
				return true
			}
		}
	}
	return false
}

// perCluster is, on a management plane, each member's share of the
// team's budget of p, by cluster name (a member without a share is not
// listed), with what the member's Kueue admitted, reserved and borrowed
// for the team's copy there, as it last reported; nil when the budget is
// not split.
func perCluster(n *Node, p state.Pair) []v1beta1.ClusterBudgetStatus {
	i := slices.IndexFunc(n.Splits, func(sp state.BudgetSplit) bool { return sp.Pair == p })
	if i < 0 {
		return nil
	}
	var out []v1beta1.ClusterBudgetStatus
	for _, sh := range n.Splits[i].Shares {
		cs := v1beta1.ClusterBudgetStatus{Cluster: sh.Cluster, Nominal: sh.Amount.Quantity()}
		if l, ok := n.Held[sh.Cluster][p]; ok {
			q := l.Nominal.Quantity()
			cs.Held = &q
		}
		for _, u := range n.MemberUsage {
			if u.Cluster == sh.Cluster && u.Pair == p {
				cs.Admitted, cs.Reserved, cs.Borrowed = u.Admitted.Quantity(), u.Reserved.Quantity(), u.Borrowed.Quantity()
			}
		}
		out = append(out, cs)
	}
	return out
}

// stamp sets a condition's lastTransitionTime: the stamp the stored status
// shows while the condition's status stands there, else when the state saw
// it take its status.
func stamp(c *metav1.Condition, n *Node) {
	at := n.Since.Ready
	if c.Type == v1beta1.ConditionMaterialized {
		at = n.Since.Materialized
	}
	for _, s := range n.Stored {
		if s.Type == c.Type && s.Status == string(c.Status) {
			at = s.Since
		}
	}
	c.LastTransitionTime = metav1.NewTime(at)
}

func materialized(n *Node) metav1.Condition {
	o := n.Outcome
	switch {
	case !n.Ready:
		return cond(v1beta1.ConditionMaterialized, false, ReasonFrozen, msgFrozenObjects, n.Generation)
	case o.Kind == events.OutcomeApplied:
		return cond(v1beta1.ConditionMaterialized, true, ReasonAdmitted, MsgMaterialized, n.Generation)
	case o.Kind == events.OutcomeConflict || o.Kind == events.OutcomeFailed:
		return cond(v1beta1.ConditionMaterialized, false, string(o.Kind), o.Message, n.Generation)
	default:
		return cond(v1beta1.ConditionMaterialized, false, ReasonPending, msgPendingApply, n.Generation)
	}
}

// summary is the text of the NOMINAL and ADMITTED columns: the amount alone
// for one budget, else resource@flavor=amount pairs in spec order.
func summary(n *Node) *v1beta1.StatusSummary {
	if len(n.Budgets) == 1 {
		b := n.Budgets[0]
		u := n.Usage[state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}]
		return &v1beta1.StatusSummary{Nominal: b.Nominal.String(), Admitted: admittedText(n, u)}
	}
	var nom, adm []string
	for _, b := range n.Budgets {
		u := n.Usage[state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}]
		nom = append(nom, fmt.Sprintf("%s@%s=%s", b.ResourceName, b.ResourceFlavor, b.Nominal.String()))
		adm = append(adm, fmt.Sprintf("%s@%s=%s", b.ResourceName, b.ResourceFlavor, admittedText(n, u)))
	}
	s := &v1beta1.StatusSummary{Nominal: strings.Join(nom, ",")}
	if n.Role == v1beta1.RoleClusterQueue {
		s.Admitted = strings.Join(adm, ",")
	}
	return s
}

func admittedText(n *Node, u events.Usage) string {
	if n.Role != v1beta1.RoleClusterQueue {
		return ""
	}
	return u.Admitted.String()
}
