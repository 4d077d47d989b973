package quotactl

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/impact"
	"ome.io/quota-manager/kueuesim"
	"ome.io/quota-manager/quotafile"
)

type planOptions struct {
	*options
	files         []string
	deletes       []string
	withoutNodes  []string
	output        string
	claimPriority int32
	claimSize     string
}

func (o *options) planCommand() *cobra.Command {
	p := &planOptions{options: o}
	c := &cobra.Command{
		Use:   "plan [-f FILE|DIR|-]... [--delete NAME]... [--without-nodes SELECTOR|NAME]...",
		Short: "Show what a change of the tree does to the work Kueue runs, before applying it",
		Long: `plan judges a change as validate does (the files laid over the live tree, then --delete and
--without-nodes) and then reads Kueue's Workloads and simulates Kueue v0.17's scheduler on the
quota the manager would write, to say what the change does to running work:

  - per node whose budgets change: old and new nominal, borrowing and lending limits per
    resource@flavor, a team's admitted usage, and how much of it is above the new budget;
  - the admitted Workloads that make up usage left above a team's budget (nominal plus
    borrowingLimit), in the order Kueue's preemption would take them: Kueue does not evict them;
  - the pending Workloads that Kueue admits once the change applies, and what it preempts for them;
  - what Kueue reclaims when lenders bring their own work: every ClusterQueue that uses less than
    its nominal quota of a pair the change touches claims the rest, lender by lender in name order,
    as one Workload (or Workloads of --claim-size) at --claim-priority; for each claim, the
    Workloads preempted, in the order Kueue considers them, and why a claim would wait;
  - the borrowing Workloads that no claim preempts, and why.

plan writes nothing. Exit status: 0 when no admitted Workload is affected; 2 when a write would be
denied, the tree breaks a rule, or --without-nodes would freeze a node (as validate); 3 when the
change is admissible but leaves admitted usage above a budget, or lets Kueue preempt Workloads that
it would not preempt without the change; 1 for a usage or API error.`,
		Example: `  # Lower team-beta: whose Workloads sit above its budget, and what does team-alpha reclaim?
  kubectl ome quota plan -f quota-tree.yaml

  # The lenders' work arrives as one-GPU pods at priority 100
  kubectl ome quota plan -f quota-tree.yaml --claim-size 1 --claim-priority 100

  # A versioned report, for a pipeline that gates on the exit status
  kubectl ome quota plan -f quota-tree.yaml -o json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(c, "plan takes no arguments, got %q: pass files with -f", args)
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error { return p.run(c) },
	}
	fs := c.Flags()
	fs.StringSliceVarP(&p.files, "filename", "f", nil, "Files, folders or - (standard input) holding AcceleratorQuotas to lay over the tree, in order.")
	fs.StringSliceVar(&p.deletes, "delete", nil, "Names of tree nodes to try deleting, after the files.")
	fs.StringSliceVar(&p.withoutNodes, "without-nodes", nil, "Node names or label selectors: judge the change without these Nodes.")
	fs.Int32Var(&p.claimPriority, "claim-priority", 0, "Priority of the lenders' claims (Kueue's default priority is 0).")
	fs.StringVar(&p.claimSize, "claim-size", "", "Size of each Workload a lender's claim arrives as, e.g. 1 for one-GPU pods; empty: one Workload of the whole unused quota.")
	addOutputFlag(fs, &p.output)
	return c
}

func (p *planOptions) run(c *cobra.Command) error {
	if err := checkOutput(c, p.output); err != nil {
		return err
	}
	var size resource.Quantity
	if p.claimSize != "" {
		q, err := resource.ParseQuantity(p.claimSize)
		if err != nil || q.Sign() <= 0 {
			return usageError(c, "--claim-size %q is not an amount above 0: write one such as 1 or 4", p.claimSize)
		}
		size = q
	}
	writes, err := quotafile.Read(p.files, p.streams.In, "plan")
	if err != nil {
		return err
	}
	for _, d := range p.deletes {
		writes = append(writes, quotafile.Write{Name: d})
	}
	cfg, err := p.coreConfig(c)
	if err != nil {
		return err
	}
	cs, err := p.clients()
	if err != nil {
		return err
	}
	ctx := c.Context()
	cl, err := cs.read(ctx, c.ErrOrStderr())
	if err != nil {
		return err
	}
	kq := cs.kueue.KueueV1beta2()
	cohorts, err := kq.Cohorts().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	lqs, err := kq.LocalQueues("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	wls, err := kq.Workloads("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	now := p.now()
	var without []string
	if len(p.withoutNodes) > 0 {
		if without, err = selectNodes(cl, p.withoutNodes); err != nil {
			return err
		}
	}
	val, rep, err := planOf(cl, kueueLists{cohorts: cohorts.Items, localQueues: lqs.Items, workloads: wls.Items}, cfg, now, writes, without,
		impact.ClaimOptions{Priority: int64(p.claimPriority), Size: size})
	if err != nil {
		return err
	}
	imp := rep.Impact
	if done, err := printReport(c, p.output, rep, p.streams.Out); done {
		if err != nil {
			return err
		}
	} else if err := p.printText(p.streams.Out, val, rep); err != nil {
		return err
	}
	switch {
	case len(rep.Violations) > 0 || len(rep.WouldFreeze) > 0:
		return violationsFound
	case imp.Harmful():
		return impactFound
	}
	return nil
}

// kueueLists are what plan lists of Kueue beside what every command reads.
type kueueLists struct {
	cohorts     []kueue.Cohort
	localQueues []kueue.LocalQueue
	workloads   []kueue.Workload
}

// planOf is plan's own work on what it listed: the rule book's verdict on
// the writes and the change's impact.
func planOf(cl *cluster, kl kueueLists, cfg events.Config, now time.Time, writes []quotafile.Write, without []string, claims impact.ClaimOptions) (*ValidationReport, *PlanReport, error) {
	before := cl.replay(cfg, now)
	val, after, err := judge(cl.replay(cfg, now), cl, cfg, now, writes, without, false, nil)
	if err != nil {
		return nil, nil, err
	}
	// A management plane runs no Workloads: its teams' work is on its
	// members, which the report does not reach yet (impact.Report.Members).
	onPlane := cl.planeMembers() != nil
	imp, err := impact.Compute(impact.Input{
		Before: before.s, After: after,
		Settings:      impact.SettingsOf(before.s, cl.queues, kl.localQueues),
		Live:          kueuesim.Objects{Cohorts: kl.cohorts, ClusterQueues: cl.queues, Flavors: cl.flavors},
		LocalQueues:   impact.LocalQueuesOf(kl.localQueues),
		Workloads:     kl.workloads,
		WithWorkloads: !onPlane,
		Claims:        claims,
		Now:           now,
	})
	if err != nil {
		return nil, nil, err
	}
	rep := &PlanReport{TypeMeta: typeMeta("PlanReport"), Violations: val.Violations, Warnings: val.Warnings,
		Marks: val.Marks, WithoutNodes: val.WithoutNodes, WouldFreeze: val.WouldFreeze, Impact: imp}
	return val, rep, nil
}

func (p *planOptions) printText(w io.Writer, val *ValidationReport, rep *PlanReport) error {
	pal := palette(p.colorOn(w))
	var b strings.Builder
	v := &validateOptions{options: p.options}
	if len(val.Violations) > 0 || len(val.Warnings) > 0 || len(val.WithoutNodes) > 0 {
		var vb strings.Builder
		v.printText(&vb, val)
		// The verdict line comes last, once, below the impact.
		lines := strings.SplitAfter(vb.String(), "\n")
		for _, l := range lines {
			if !strings.Contains(l, "violation(s): the webhook would deny") && !strings.Contains(l, "the tree keeps every rule") {
				b.WriteString(l)
			}
		}
	}
	if err := impact.WriteText(&b, rep.Impact, impact.Style{Bad: pal.bad, Warn: pal.warn, Good: pal.good}); err != nil {
		return err
	}
	switch {
	case len(rep.Violations) > 0:
		fmt.Fprintf(&b, "%d violation(s): the webhook would deny these writes, or the tree breaks a rule\n", len(rep.Violations))
	case len(rep.WouldFreeze) > 0:
		b.WriteString(pal.bad("without those Nodes, nodes would freeze") + "\n")
	case rep.Impact.Harmful():
		b.WriteString(pal.warn("the change is admissible, but it leaves admitted work above budget, or lets Kueue preempt Workloads it would not preempt without it") + "\n")
	default:
		b.WriteString(pal.good("the change keeps every rule and affects no admitted Workload") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
