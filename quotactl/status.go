package quotactl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueac "sigs.k8s.io/kueue/client-go/applyconfiguration/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

type statusOptions struct {
	*options
	output string
}

func (o *options) statusCommand() *cobra.Command {
	so := &statusOptions{options: o}
	c := &cobra.Command{
		Use:   "status NODE",
		Short: "Explain one node: conditions, causes, Kueue objects and budgets",
		Long: `status explains why a node is in its state: its conditions with their reasons and messages,
the chain of causes up to the node whose own rule froze it, the Kueue objects written for it and
whether each matches what the quota manager computes for it, and each budget against its
parent's budget and root's high-water mark.`,
		Example: `  # Why is team-beta not Ready?
  kubectl ome quota status team-beta

  # The same, as a versioned report
  kubectl ome quota status team-beta -o yaml`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(c, "status needs exactly one NODE, got %d", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkOutput(c, so.output); err != nil {
				return err
			}
			cfg, err := so.coreConfig(c)
			if err != nil {
				return err
			}
			cs, err := so.clients()
			if err != nil {
				return err
			}
			cl, err := cs.read(c.Context(), c.ErrOrStderr())
			if err != nil {
				return err
			}
			aq := cl.quota(args[0])
			if aq == nil {
				return notFound(args[0])
			}
			s := cl.replay(cfg, so.now()).s
			rep := so.report(cl, s, aq)
			if cl.planeMembers() != nil {
				rep.Copies = copiesOf(aq)
			} else if err := so.objects(c, cs, cl, s, aq, rep); err != nil {
				return err
			}
			if aq.Name == v1beta1.RootName {
				rep.Admission = admissionOf(c.Context(), cs)
			}
			if done, err := printReport(c, so.output, rep, so.streams.Out); done {
				return err
			}
			so.printText(so.streams.Out, rep)
			return nil
		},
	}
	addOutputFlag(c.Flags(), &so.output)
	return c
}

func (so *statusOptions) report(cl *cluster, s *state.State, aq *v1beta1.AcceleratorQuota) *StatusReport {
	rep := &StatusReport{TypeMeta: typeMeta("StatusReport"), Node: *nodeReport(aq, s), Conditions: aq.Status.Conditions}
	rep.Node.Children = nil
	// The chain of causes: the node, then its ancestors up to the one whose
	// own rule froze it.
	if v, ok := s.Node(aq.Name); ok && !v.Ready() {
		for cur := aq.Name; cur != ""; {
			st, ok := s.NodeStatus(cur)
			if !ok {
				break
			}
			rep.Causes = append(rep.Causes, CauseReport{Node: cur, Reason: string(st.Reason), Message: st.Message})
			if cur == v.FrozenBy || st.Phase != state.PhaseFrozen {
				break
			}
			nv, _ := s.Node(cur)
			cur = nv.Parent
		}
	}
	marks := s.Marks()
	var parentBudgets map[state.Pair]state.Amount
	if rep.Node.Parent != "" {
		if p := cl.quota(rep.Node.Parent); p != nil {
			parentBudgets = map[state.Pair]state.Amount{}
			for _, b := range state.BudgetsOf(&p.Spec) {
				parentBudgets[b.Pair] = b.Nominal
			}
		}
	}
	for _, b := range state.BudgetsOf(&aq.Spec) {
		bc := BudgetCheck{Resource: b.Resource, Flavor: b.Flavor, Nominal: b.Nominal.String(), HighWaterMark: marks[b.Pair].String()}
		if parentBudgets != nil {
			bc.Parent = rep.Node.Parent
			if pn, ok := parentBudgets[b.Pair]; ok {
				bc.ParentNominal = pn.String()
				bc.SiblingsTotal = s.ChildTotal(rep.Node.Parent, b.Pair).String()
			}
		}
		rep.Budgets = append(rep.Budgets, bc)
	}
	return rep
}

// webhookConfig is the admission webhook's ValidatingWebhookConfiguration.
const webhookConfig = "ome-quota-manager.ome.io"

// admissionOf reads what the webhook's replicas said of themselves on its
// configuration (v1beta1.WebhookCallersAnnotation, WebhookPolicyAnnotation).
func admissionOf(ctx context.Context, cs *clients) *AdmissionReport {
	cfg, err := cs.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookConfig, metav1.GetOptions{})
	if err != nil {
		return &AdmissionReport{Error: fmt.Sprintf("cannot read the ValidatingWebhookConfiguration %s: %v", webhookConfig, err)}
	}
	const none = "not reported: no replica running this version has started"
	r := &AdmissionReport{Callers: cfg.Annotations[v1beta1.WebhookCallersAnnotation], NetworkPolicy: cfg.Annotations[v1beta1.WebhookPolicyAnnotation]}
	if r.Callers == "" {
		r.Callers = none
	}
	if r.NetworkPolicy == "" {
		r.NetworkPolicy = "not compared: the release has no NetworkPolicy, or " + none
	}
	return r
}

// copiesOf is, on a plane, how each member holds the node's copy, as the
// node's status.clusters says.
func copiesOf(aq *v1beta1.AcceleratorQuota) []CopyReport {
	var out []CopyReport
	for _, c := range aq.Status.Clusters {
		r := CopyReport{Cluster: c.Cluster, AppliedGeneration: c.AppliedGeneration, MaterializedGeneration: c.MaterializedGeneration, Detail: c.Message}
		switch {
		case strings.HasPrefix(c.Message, projector.ReasonClusterUnreachable+":"):
			r.State = "Unreachable"
		case c.AppliedGeneration == 0:
			r.State = "Missing"
		case c.AppliedGeneration != aq.Generation:
			r.State = "Differs"
		default:
			r.State = "Matches"
		}
		out = append(out, r)
	}
	return out
}

// objects compares the node's Kueue objects with the projector's desired
// ones. The enrolled namespaces and cover resources are the manager's
// settings, which the plugin does not know: it reads them back from the
// managed ClusterQueues and LocalQueues, so that only what the node decides
// (cohort, quotas, limits, queue) is judged.
func (so *statusOptions) objects(c *cobra.Command, cs *clients, cl *cluster, s *state.State, aq *v1beta1.AcceleratorQuota, rep *StatusReport) error {
	ctx := c.Context()
	kq := cs.kueue.KueueV1beta2()
	managed := metav1.ListOptions{LabelSelector: v1beta1.ManagedByLabel + "=" + v1beta1.ManagedByValue}
	lqs, err := kq.LocalQueues("").List(ctx, managed)
	if err != nil {
		return err
	}
	var namespaces []string
	for _, lq := range lqs.Items {
		namespaces = append(namespaces, lq.Namespace)
	}
	var liveCQ *kueue.ClusterQueue
	for i := range cl.queues {
		q := &cl.queues[i]
		if q.Labels[v1beta1.ManagedByLabel] != v1beta1.ManagedByValue {
			continue
		}
		if sel := q.Spec.NamespaceSelector; sel != nil {
			for _, e := range sel.MatchExpressions {
				if e.Key == corev1.LabelMetadataName {
					namespaces = append(namespaces, e.Values...)
				}
			}
		}
		if q.Name == aq.Name {
			liveCQ = q
		}
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	out := projector.Project(projector.FromState(s, namespaces, coverOf(aq, liveCQ)))
	held := out.Held[aq.Name]
	judge := func(kind, ns, name string, desired any, live any, getErr error) {
		r := ObjectReport{Kind: kind, Namespace: ns, Name: name}
		switch {
		case getErr != nil && apierrors.IsNotFound(getErr):
			r.State = "Missing"
			if held {
				r.State, r.Detail = "Held", "none exists; the node is not Ready, so none is written"
			}
		case getErr != nil:
			r.State, r.Detail = "Unknown", getErr.Error()
		case held:
			r.State, r.Detail = "Held", "the node is not Ready, so the object is left as it was"
		case desired == nil:
			r.State, r.Detail = "Differs", "not desired: nothing is written while no namespace is enrolled"
		default:
			if path, ok := subset(desired, live); ok {
				r.State = "Matches"
			} else {
				r.State, r.Detail = "Differs", "at "+path
			}
		}
		rep.Objects = append(rep.Objects, r)
	}
	switch aq.Spec.Role {
	case v1beta1.RoleCohort:
		live, err := kq.Cohorts().Get(ctx, aq.Name, metav1.GetOptions{})
		judge("Cohort", "", aq.Name, find(out.Cohorts, func(d *kueueac.CohortApplyConfiguration) bool { return *d.Name == aq.Name }), live, err)
	case v1beta1.RoleClusterQueue:
		live, err := kq.ClusterQueues().Get(ctx, aq.Name, metav1.GetOptions{})
		judge("ClusterQueue", "", aq.Name, find(out.ClusterQueues, func(d *kueueac.ClusterQueueApplyConfiguration) bool { return *d.Name == aq.Name }), live, err)
		for _, ns := range namespaces {
			live, err := kq.LocalQueues(ns).Get(ctx, aq.Name, metav1.GetOptions{})
			judge("LocalQueue", ns, aq.Name, find(out.LocalQueues, func(d *kueueac.LocalQueueApplyConfiguration) bool {
				return *d.Name == aq.Name && *d.Namespace == ns
			}), live, err)
		}
	}
	return nil
}

// find is the desired object that match picks, or nil (an untyped nil, so
// that judge sees none).
func find[T any](objs []*T, match func(*T) bool) any {
	for _, o := range objs {
		if match(o) {
			return o
		}
	}
	return nil
}

// coverOf reads the cover resources back from a team's live ClusterQueue:
// the covered resources it budgets none of, with their ceilings.
func coverOf(aq *v1beta1.AcceleratorQuota, cq *kueue.ClusterQueue) map[string]resource.Quantity {
	if cq == nil || len(cq.Spec.ResourceGroups) == 0 {
		return projector.DefaultCoverResources()
	}
	budgeted := map[string]bool{}
	for _, b := range aq.Spec.Budgets {
		budgeted[b.ResourceName] = true
	}
	out := map[string]resource.Quantity{}
	for _, rg := range cq.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				if !budgeted[string(r.Name)] {
					out[string(r.Name)] = r.NominalQuota
				}
			}
		}
	}
	return out
}

// subset reports whether every field that desired sets has the same value
// in live, as server-side apply would leave it; else the first path that
// differs.
func subset(desired, live any) (string, bool) {
	var d, l any
	if err := roundTrip(desired, &d); err != nil {
		return err.Error(), false
	}
	if err := roundTrip(live, &l); err != nil {
		return err.Error(), false
	}
	// A typed object read from a clientset carries no apiVersion and kind.
	if m, ok := d.(map[string]any); ok {
		delete(m, "apiVersion")
		delete(m, "kind")
	}
	return contains(d, l, "")
}

func roundTrip(in any, out *any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

func contains(d, l any, path string) (string, bool) {
	switch dv := d.(type) {
	case map[string]any:
		lv, ok := l.(map[string]any)
		if !ok {
			return orRoot(path), false
		}
		for _, k := range slices.Sorted(mapsKeys(dv)) {
			if p, ok := contains(dv[k], lv[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		lv, ok := l.([]any)
		if !ok || len(lv) != len(dv) {
			return orRoot(path), false
		}
		for i := range dv {
			if p, ok := contains(dv[i], lv[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	case string:
		// Quantities compare by value: "1M" and "1000k" are one amount.
		if ls, ok := l.(string); ok {
			if dq, err1 := resource.ParseQuantity(dv); err1 == nil {
				if lq, err2 := resource.ParseQuantity(ls); err2 == nil && dq.Cmp(lq) == 0 {
					return "", true
				}
			}
		}
	}
	if reflect.DeepEqual(d, l) {
		return "", true
	}
	return orRoot(path), false
}

func orRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func (so *statusOptions) printText(w io.Writer, rep *StatusReport) {
	p := palette(so.colorOn(w))
	var b strings.Builder
	n := rep.Node
	fmt.Fprintf(&b, "Name:    %s\nRole:    %s\n", p.bold(n.Name), n.Role)
	if n.Parent != "" {
		fmt.Fprintf(&b, "Parent:  %s\n", n.Parent)
	}
	b.WriteString("Conditions:\n")
	if len(rep.Conditions) == 0 {
		b.WriteString("  none yet: the quota manager has not reported on this node\n")
	}
	for _, c := range rep.Conditions {
		line := fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		good := (c.Status == metav1.ConditionTrue) != (c.Type == v1beta1.ConditionDegraded)
		if good {
			line = p.good(line)
		} else {
			line = p.bad(line)
		}
		b.WriteString("  " + line + "\n")
	}
	if len(rep.Causes) > 0 {
		b.WriteString("Caused by:\n")
		for i, c := range rep.Causes {
			fmt.Fprintf(&b, "  %s%s %s: %s\n", strings.Repeat("  ", i), c.Node, c.Reason, c.Message)
		}
	}
	if rep.Copies != nil {
		b.WriteString("Copies on member clusters:\n")
		for _, c := range rep.Copies {
			st := c.State
			if st == "Matches" {
				st = p.good(st)
			} else {
				st = p.bad(st)
			}
			line := fmt.Sprintf("  %s: %s", c.Cluster, st)
			switch {
			case c.AppliedGeneration == 0:
			case c.MaterializedGeneration == c.AppliedGeneration:
				line += fmt.Sprintf(" (generation %d, in Kueue)", c.AppliedGeneration)
			case c.MaterializedGeneration == 0:
				line += fmt.Sprintf(" (generation %d, not in Kueue yet)", c.AppliedGeneration)
			default:
				line += fmt.Sprintf(" (generation %d, in Kueue from generation %d)", c.AppliedGeneration, c.MaterializedGeneration)
			}
			if c.Detail != "" {
				line += ": " + c.Detail
			}
			b.WriteString(line + "\n")
		}
	} else {
		b.WriteString("Kueue objects:\n")
	}
	if len(rep.Objects) == 0 && rep.Copies == nil {
		b.WriteString("  none\n")
	}
	for _, o := range rep.Objects {
		name := o.Name
		if o.Namespace != "" {
			name = o.Namespace + "/" + o.Name
		}
		st := o.State
		switch o.State {
		case "Matches":
			st = p.good(st)
		case "Held":
			st = p.warn(st)
		default:
			st = p.bad(st)
		}
		line := fmt.Sprintf("  %s %s: %s", o.Kind, name, st)
		if o.Detail != "" {
			line += " (" + o.Detail + ")"
		}
		b.WriteString(line + "\n")
	}
	if a := rep.Admission; a != nil {
		b.WriteString("Admission webhook:\n")
		if a.Error != "" {
			b.WriteString("  " + p.bad(a.Error) + "\n")
		} else {
			callers := "Callers " + a.Callers
			if strings.HasPrefix(a.Callers, "authenticated") {
				callers = p.good(callers)
			} else {
				callers = p.warn(callers)
			}
			policy := "NetworkPolicy " + a.NetworkPolicy
			if strings.HasPrefix(a.NetworkPolicy, "current") {
				policy = p.good(policy)
			} else {
				policy = p.warn(policy)
			}
			b.WriteString("  " + callers + "\n  " + policy + "\n")
		}
	}
	if len(rep.Budgets) > 0 {
		b.WriteString("Budgets:\n")
	}
	for _, bc := range rep.Budgets {
		line := fmt.Sprintf("  %s  nominal %s", pairKey(bc.Resource, bc.Flavor), bc.Nominal)
		switch {
		case bc.ParentNominal != "":
			line += fmt.Sprintf("  parent %s %s (its children total %s)", bc.Parent, bc.ParentNominal, bc.SiblingsTotal)
		case bc.Parent != "":
			line += fmt.Sprintf("  parent %s sets no budget for it", bc.Parent)
		}
		line += "  high-water mark " + bc.HighWaterMark
		b.WriteString(line + "\n")
	}
	io.WriteString(w, b.String())
}
