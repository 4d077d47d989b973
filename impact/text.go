package impact

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Style colours words of the text; the zero Style leaves them.
type Style struct {
	Bad, Warn, Good func(string) string
}

func (s Style) bad(v string) string {
	if s.Bad == nil {
		return v
	}
	return s.Bad(v)
}

func (s Style) warn(v string) string {
	if s.Warn == nil {
		return v
	}
	return s.Warn(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c Change) text() string {
	if c.Old == c.New {
		return orDash(c.New)
	}
	return orDash(c.Old) + " -> " + orDash(c.New)
}

// WriteText prints the report as tables, in the order things happen:
// the budgets that change, the admitted usage left above budget, the
// pending Workloads let in, the lenders' claims and what they preempt,
// and the borrowing Workloads left running.
func WriteText(w io.Writer, r *Report, st Style) error {
	var b strings.Builder
	if len(r.Nodes) > 0 {
		b.WriteString("Budgets that change:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tCHANGE\tKUEUE\tRESOURCE@FLAVOR\tNOMINAL\tBORROWING\tLENDING\tADMITTED\tABOVE BUDGET")
		for _, n := range r.Nodes {
			if len(n.Budgets) == 0 {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t-\t-\t-\t-\t-\t-\n", n.Node, n.Change, n.Kueue)
			}
			for _, bc := range n.Budgets {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s@%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Change, n.Kueue, bc.Resource, bc.Flavor,
					bc.Nominal.text(), bc.BorrowingLimit.text(), bc.LendingLimit.text(), orDash(bc.Admitted), orDash(bc.AboveBudget))
			}
		}
		tw.Flush()
		for _, n := range r.Nodes {
			if n.State != "" {
				fmt.Fprintf(&b, "  %s would be %s\n", n.Node, n.State)
			}
			if n.Kueue == "Kept" {
				fmt.Fprintf(&b, "  %s: Kueue keeps its ClusterQueue, terminating, until its admitted Workloads end\n", n.Node)
			}
		}
	}
	if len(r.Members) > 0 {
		b.WriteString("Shares that move on each member cluster (lowerings are written first, raises once they are read back):\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  MEMBER\tTEAM\tRESOURCE@FLAVOR\tSHARE")
		for _, m := range r.Members {
			for _, sc := range m.Shares {
				fmt.Fprintf(tw, "  %s\t%s\t%s@%s\t%s\n", m.Cluster, sc.Team, sc.Resource, sc.Flavor, sc.Share.text())
			}
		}
		tw.Flush()
		for _, m := range r.Members {
			for _, e := range m.AboveBudget {
				fmt.Fprintf(&b, "  %s\n", st.bad(e.Message))
			}
		}
	}
	if len(r.AboveBudget) > 0 {
		head := "Admitted usage left above budget (Kueue does not evict it):\n"
		for _, e := range r.AboveBudget {
			if len(e.Workloads) > 0 {
				head = "Admitted usage left above budget (Kueue does not evict it), with the Workloads that make it up in the order Kueue's preemption takes them:\n"
			}
		}
		b.WriteString(head)
		for _, e := range r.AboveBudget {
			fmt.Fprintf(&b, "  %s\n", st.bad(e.Message))
			writeWorkloads(&b, e.Workloads, false)
		}
	}
	if len(r.Admits) > 0 {
		b.WriteString("Pending Workloads that Kueue admits after the change:\n")
		var ws []Workload
		for _, a := range r.Admits {
			ws = append(ws, a.Workload)
		}
		writeWorkloads(&b, ws, false)
		for _, a := range r.Admits {
			if len(a.Preempts) > 0 {
				fmt.Fprintf(&b, "  to admit %s/%s, Kueue preempts:\n", a.Workload.Namespace, a.Workload.Name)
				writeWorkloads(&b, a.Preempts, true)
			}
		}
	}
	var claims []Claim
	for _, c := range r.Claims {
		// A claim that fits in idle quota moves nothing.
		if len(c.Preempts) > 0 || c.Waits != "" || c.Unsure != "" {
			claims = append(claims, c)
		}
	}
	if len(claims) > 0 {
		b.WriteString("When lenders claim their unused quota, Kueue reclaims:\n")
		for _, c := range claims {
			shape := "one Workload"
			if c.Size != "" {
				shape = "Workloads of " + c.Size
			}
			fmt.Fprintf(&b, "  %s claims %s %s on %s (%s, priority %d): %s admitted", c.Team, c.Amount, c.Resource, c.Flavor, shape, c.Priority, c.Admitted)
			if len(c.Preempts) > 0 {
				b.WriteString(", after preempting, in this order:\n")
				writeWorkloads(&b, c.Preempts, true)
			} else {
				b.WriteString("\n")
			}
			if c.Waits != "" {
				fmt.Fprintf(&b, "    %s\n", st.warn(c.Waits))
			}
			if c.Unsure != "" {
				fmt.Fprintf(&b, "    %s\n", st.warn(c.Unsure))
			}
		}
	}
	if len(r.NotReclaimed) > 0 {
		b.WriteString("Borrowing Workloads that no claim preempts:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "    NAMESPACE\tWORKLOAD\tCLUSTERQUEUE\tPRIORITY\tUSAGE\tWHY")
		for _, s := range r.NotReclaimed {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%d\t%s\t%s\n", s.Workload.Namespace, s.Workload.Name, s.Workload.ClusterQueue, s.Workload.Priority, s.Workload.Usage, s.Why)
		}
		tw.Flush()
	}
	for _, l := range r.Limits {
		fmt.Fprintf(&b, "Note: %s\n", l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeWorkloads(b *strings.Builder, ws []Workload, preempted bool) {
	if len(ws) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	head := "    NAMESPACE\tWORKLOAD\tCLUSTERQUEUE\tPRIORITY\tADMITTED\tUSAGE"
	if preempted {
		head += "\tREASON\tRECLAIMED WITHOUT THE CHANGE"
	}
	fmt.Fprintln(tw, head)
	for _, w := range ws {
		at := "-"
		if w.AdmittedAt != nil {
			at = w.AdmittedAt.UTC().Format(time.RFC3339)
		}
		line := fmt.Sprintf("    %s\t%s\t%s\t%d\t%s\t%s", orDash(w.Namespace), w.Name, w.ClusterQueue, w.Priority, at, w.Usage)
		if preempted {
			again := "no"
			if w.ReclaimedBefore {
				again = "yes"
			}
			line += "\t" + w.Reason + "\t" + again
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}
