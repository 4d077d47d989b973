package quotactl

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/state"
)

type treeOptions struct {
	*options
	output string
	wide   bool
}

func (o *options) treeCommand() *cobra.Command {
	t := &treeOptions{options: o}
	c := &cobra.Command{
		Use:   "tree [NODE]",
		Short: "Print the quota tree with budgets, usage, states and capacity",
		Long: `tree prints the AcceleratorQuota tree from root, or from NODE: each node's role, its budgets
(nominal, borrowingLimit and lendingLimit per resource@flavor), a team's admitted usage, and its
Ready and Materialized conditions with their reasons. A frozen node names the node that froze it.
Root shows the measured capacity and the high-water marks, with how long ago they were measured.
On a management plane, each team's budget shows its share on each member cluster, and root each
member's capacity.

Colour is used only on a terminal, and never when NO_COLOR is set.`,
		Example: `  # The whole tree
  kubectl ome quota tree

  # ml-research and its teams, with limits, reservations and condition messages
  kubectl ome quota tree ml-research --wide

  # A versioned report, for scripts
  kubectl ome quota tree -o json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(c, "tree takes at most one NODE, got %d: %s", len(args), strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkOutput(c, t.output); err != nil {
				return err
			}
			cfg, err := t.coreConfig(c)
			if err != nil {
				return err
			}
			cs, err := t.clients()
			if err != nil {
				return err
			}
			cl, err := cs.read(c.Context(), c.ErrOrStderr())
			if err != nil {
				return err
			}
			from := v1beta1.RootName
			if len(args) == 1 {
				from = args[0]
			}
			rep, err := t.report(cl, cl.replay(cfg, t.now()).s, from)
			if err != nil {
				return err
			}
			if done, err := printReport(c, t.output, rep, t.streams.Out); done {
				return err
			}
			t.printText(t.streams.Out, rep)
			return nil
		},
	}
	addOutputFlag(c.Flags(), &t.output)
	c.Flags().BoolVar(&t.wide, "wide", false, "Also print lending limits, reserved and borrowed amounts, condition messages and measurement times.")
	return c
}

// notFound is the API's NotFound for an AcceleratorQuota, as kubectl
// prints it.
func notFound(name string) error {
	return apierrors.NewNotFound(v1beta1.Resource("acceleratorquotas"), name)
}

// report builds the tree from node from.
func (t *treeOptions) report(cl *cluster, s *state.State, from string) (*TreeReport, error) {
	if cl.quota(from) == nil {
		return nil, notFound(from)
	}
	now := t.now()
	byName := map[string]*NodeReport{}
	for i := range cl.quotas {
		aq := &cl.quotas[i]
		byName[aq.Name] = nodeReport(aq, s)
	}
	var unreachable []*NodeReport
	for _, name := range slices.Sorted(mapsKeys(byName)) {
		n := byName[name]
		if p := byName[n.Parent]; p != nil && n.Name != v1beta1.RootName {
			p.Children = append(p.Children, n)
			continue
		}
		if n.Name != v1beta1.RootName {
			unreachable = append(unreachable, n)
		}
	}
	rep := &TreeReport{TypeMeta: typeMeta("TreeReport"), Tree: byName[from]}
	if from == v1beta1.RootName {
		rep.Unreachable = unreachable
	}
	if root := cl.quota(v1beta1.RootName); root != nil {
		for _, c := range root.Status.Capacity {
			cr := CapacityReport{
				Resource: c.ResourceName, Flavor: c.ResourceFlavor,
				Allocatable: c.Allocatable.String(), HighWaterMark: c.HighWaterMark.String(),
				ObservedAt: c.ObservedAt, Age: age(now.Sub(c.ObservedAt.Time)),
			}
			for _, pc := range c.PerCluster {
				cr.Members = append(cr.Members, MemberCapacityReport{Cluster: pc.Cluster, Allocatable: pc.Allocatable.String(), HighWaterMark: pc.HighWaterMark.String()})
			}
			rep.Capacity = append(rep.Capacity, cr)
		}
	}
	return rep, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// nodeReport is one node, with its conditions from its status and its
// freezing ancestor from the core.
func nodeReport(aq *v1beta1.AcceleratorQuota, s *state.State) *NodeReport {
	n := &NodeReport{Name: aq.Name, Role: string(aq.Spec.Role)}
	if aq.Spec.ParentRef != nil && aq.Name != v1beta1.RootName {
		n.Parent = aq.Spec.ParentRef.Name
	}
	usage := map[string]v1beta1.BudgetStatus{}
	for _, b := range aq.Status.Budgets {
		usage[pairKey(b.ResourceName, b.ResourceFlavor)] = b
	}
	for _, b := range aq.Spec.Budgets {
		br := BudgetReport{Resource: b.ResourceName, Flavor: b.ResourceFlavor, Nominal: b.Nominal.String()}
		if b.BorrowingLimit != nil {
			br.BorrowingLimit = b.BorrowingLimit.String()
		}
		if b.LendingLimit != nil {
			br.LendingLimit = b.LendingLimit.String()
		}
		if aq.Spec.Role == v1beta1.RoleClusterQueue {
			u := usage[pairKey(b.ResourceName, b.ResourceFlavor)]
			br.Admitted, br.Reserved, br.Borrowed = u.Admitted.String(), u.Reserved.String(), u.Borrowed.String()
			for _, pc := range u.PerCluster {
				br.Shares = append(br.Shares, ShareReport{Cluster: pc.Cluster, Nominal: pc.Nominal.String()})
			}
		}
		n.Budgets = append(n.Budgets, br)
	}
	n.Ready = conditionReport(aq, v1beta1.ConditionReady)
	n.Materialized = conditionReport(aq, v1beta1.ConditionMaterialized)
	if v, ok := s.Node(aq.Name); ok && v.Phase == state.PhaseFrozen && v.FrozenBy != "" {
		n.FrozenBy = v.FrozenBy
		if st, ok := s.NodeStatus(v.FrozenBy); ok {
			n.FrozenReason = string(st.Reason)
		}
	}
	return n
}

func conditionReport(aq *v1beta1.AcceleratorQuota, typ string) *ConditionReport {
	c := meta.FindStatusCondition(aq.Status.Conditions, typ)
	if c == nil {
		return nil
	}
	return &ConditionReport{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
}

// printText prints the tree, one short line per node and per budget, so
// that a narrow terminal wraps nothing that matters.
func (t *treeOptions) printText(w io.Writer, rep *TreeReport) {
	p := palette(t.colorOn(w))
	var b strings.Builder
	var walk func(n *NodeReport, lead string, last, top bool)
	walk = func(n *NodeReport, lead string, last, top bool) {
		branch, cont := "", ""
		if !top {
			branch, cont = "├── ", "│   "
			if last {
				branch, cont = "└── ", "    "
			}
		}
		fmt.Fprintf(&b, "%s%s%s  %s  %s\n", lead, branch, p.bold(n.Name), n.Role, t.states(p, n))
		detail := lead + cont
		if len(n.Children) > 0 {
			detail += "│ "
		} else {
			detail += "  "
		}
		if t.wide {
			for _, c := range []struct {
				typ string
				c   *ConditionReport
			}{{"Ready", n.Ready}, {"Materialized", n.Materialized}} {
				if c.c != nil && c.c.Message != "" {
					fmt.Fprintf(&b, "%s%s: %s\n", detail, c.typ, c.c.Message)
				}
			}
		}
		if n.Name == v1beta1.RootName && top {
			for _, c := range rep.Capacity {
				line := fmt.Sprintf("%scapacity %s  allocatable %s  high-water mark %s  measured %s ago", detail,
					pairKey(c.Resource, c.Flavor), c.Allocatable, c.HighWaterMark, c.Age)
				if t.wide {
					line += " (" + c.ObservedAt.UTC().Format(time.RFC3339) + ")"
				}
				b.WriteString(line + "\n")
				for _, m := range c.Members {
					fmt.Fprintf(&b, "%s  member %s  allocatable %s  high-water mark %s\n", detail, m.Cluster, m.Allocatable, m.HighWaterMark)
				}
			}
		}
		for _, bu := range n.Budgets {
			b.WriteString(detail + budgetText(n, bu, t.wide) + "\n")
		}
		for i, k := range n.Children {
			walk(k, lead+cont, i == len(n.Children)-1, false)
		}
	}
	walk(rep.Tree, "", true, true)
	if len(rep.Unreachable) > 0 {
		b.WriteString("\nNot under root:\n")
		for _, n := range rep.Unreachable {
			walk(n, "", true, true)
		}
	}
	io.WriteString(w, b.String())
}

// states is a node's Ready and Materialized states with their reasons,
// and the node that froze it.
func (t *treeOptions) states(p palette, n *NodeReport) string {
	var out []string
	switch {
	case n.Ready == nil:
		out = append(out, p.warn("Ready unknown (no status yet)"))
	case n.Ready.Status == "True":
		out = append(out, p.good("Ready ("+n.Ready.Reason+")"))
	case n.FrozenBy != "":
		out = append(out, p.warn(fmt.Sprintf("NotReady (Frozen by %s, %s)", n.FrozenBy, n.FrozenReason)))
	default:
		out = append(out, p.bad("NotReady ("+n.Ready.Reason+")"))
	}
	if m := n.Materialized; m != nil {
		if m.Status == "True" {
			out = append(out, p.good("Materialized ("+m.Reason+")"))
		} else {
			out = append(out, p.bad("NotMaterialized ("+m.Reason+")"))
		}
	}
	return strings.Join(out, "  ")
}

func budgetText(n *NodeReport, b BudgetReport, wide bool) string {
	parts := []string{pairKey(b.Resource, b.Flavor), "nominal " + b.Nominal}
	if b.BorrowingLimit != "" {
		parts = append(parts, "borrowing "+b.BorrowingLimit)
	}
	if wide && b.LendingLimit != "" {
		parts = append(parts, "lending "+b.LendingLimit)
	}
	if n.Role == string(v1beta1.RoleClusterQueue) {
		parts = append(parts, "admitted "+b.Admitted)
		if wide {
			parts = append(parts, "reserved "+b.Reserved, "borrowed "+b.Borrowed)
		}
	}
	if len(b.Shares) > 0 {
		shares := make([]string, len(b.Shares))
		for i, s := range b.Shares {
			shares[i] = s.Cluster + "=" + s.Nominal
		}
		parts = append(parts, "shares "+strings.Join(shares, " "))
	}
	return strings.Join(parts, "  ")
}
