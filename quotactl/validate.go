package quotactl

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/quotafile"
	"ome.io/quota-manager/state"
)

type validateOptions struct {
	*options
	files        []string
	deletes      []string
	offline      bool
	capacity     []string
	withoutNodes []string
	members      []string
	output       string
}

func (o *options) validateCommand() *cobra.Command {
	v := &validateOptions{options: o}
	c := &cobra.Command{
		Use:   "validate [-f FILE|DIR|-]... [--delete NAME]... [--offline] [--without-nodes SELECTOR|NAME]...",
		Short: "Check a change of the tree against the rule book and the measured capacity",
		Long: `validate runs the quota manager's rule book over the live tree with the files laid over it, in
order, as kubectl apply would write them, and --delete NAME to try a removal. Each write is judged
as the admission webhook judges it, and a write the webhook would deny prints the webhook's own
message. The resulting tree is then checked as a whole. A budget above root's high-water mark is
a warning, as the webhook admits it: the node reports CapacityExceeded.

--offline judges the files alone, with no cluster and no kubeconfig: a root Cohort is assumed when
the files hold none, every named ResourceFlavor is assumed to exist, and budgets are checked
against capacity only for the pairs given with --capacity resource@flavor=N.

--members judges the files as a management plane's fleet tree split among those member clusters:
an Explicit split (perCluster) must name members only, each once, and add up to at most its budget,
and a Proportional one needs a --capacity mark above 0 for its pair. Every named ResourceFlavor is
assumed to exist on some member.

--without-nodes answers "what if I retire these Nodes?": it recomputes the high-water marks
without them, by the hysteresis rule with --capacity-hysteresis-percent, and lists the tree nodes
that would become CapacityExceeded or frozen. A value with "=" or "!" is a label selector, any
other a Node name.

validate writes nothing. Exit status: 0 when the tree keeps every rule, 2 when it breaks one (or
when --without-nodes would freeze a node), 1 for a usage or API error.`,
		Example: `  # Check a change before applying it
  kubectl ome quota validate -f quota-tree.yaml

  # Try removing a team
  kubectl ome quota validate --delete team-beta

  # Check files without a cluster, against 32 A100 GPUs
  kubectl ome quota validate --offline -f quota-tree.yaml --capacity nvidia.com/gpu@a100=32

  # Check a fleet tree's Explicit splits among two member clusters
  kubectl ome quota validate --offline -f fleet-tree.yaml --members east,west --capacity nvidia.com/gpu@a100=64

  # What freezes if two nodes are retired?
  kubectl ome quota validate --without-nodes gpu-node-1,gpu-node-2
  kubectl ome quota validate --without-nodes rack=r7`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(c, "validate takes no arguments, got %q: pass files with -f", args)
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error { return v.run(c) },
	}
	fs := c.Flags()
	fs.StringSliceVarP(&v.files, "filename", "f", nil, "Files, folders or - (standard input) holding AcceleratorQuotas to lay over the tree, in order.")
	fs.StringSliceVar(&v.deletes, "delete", nil, "Names of tree nodes to try deleting, after the files.")
	fs.BoolVar(&v.offline, "offline", false, "Judge the files alone, without a cluster.")
	fs.StringSliceVar(&v.capacity, "capacity", nil, "With --offline: high-water marks, as resource@flavor=N.")
	fs.StringSliceVar(&v.members, "members", nil, "With --offline: judge a management plane's fleet tree, split among these member clusters.")
	fs.StringSliceVar(&v.withoutNodes, "without-nodes", nil, "Node names or label selectors: recompute the marks without these Nodes.")
	addOutputFlag(fs, &v.output)
	return c
}

func (v *validateOptions) run(c *cobra.Command) error {
	if err := checkOutput(c, v.output); err != nil {
		return err
	}
	switch {
	case v.offline && len(v.withoutNodes) > 0:
		return usageError(c, "--without-nodes needs the cluster's Nodes: drop --offline")
	case !v.offline && len(v.capacity) > 0:
		return usageError(c, "--capacity is for --offline; online, the marks are root's")
	case !v.offline && len(v.members) > 0:
		return usageError(c, "--members is for --offline: a plane's members are its own configuration")
	case v.offline && len(v.files) == 0:
		return usageError(c, "--offline judges files: pass them with -f")
	}
	marks, err := parseCapacity(v.capacity)
	if err != nil {
		return usageError(c, "%s", err)
	}
	writes, err := quotafile.Read(v.files, v.streams.In, "validate")
	if err != nil {
		return err
	}
	for _, d := range v.deletes {
		writes = append(writes, quotafile.Write{Name: d})
	}
	cfg, err := v.coreConfig(c)
	if err != nil {
		return err
	}
	if len(v.members) > 0 {
		cfg.Mode, cfg.Members = events.ModeManagement, v.members
		cfg = cfg.Normalized()
		if err := cfg.Validate(); err != nil {
			return usageError(c, "%s", strings.ReplaceAll(err.Error(), "fix --member", "fix --members"))
		}
	}
	now := v.now()

	var r *replayer
	var cl *cluster
	if v.offline {
		r = offlineBase(cfg, now, writes, marks)
	} else {
		cs, err := v.clients()
		if err != nil {
			return err
		}
		if cl, err = cs.read(c.Context(), c.ErrOrStderr()); err != nil {
			return err
		}
		r = cl.replay(cfg, now)
	}
	var without []string
	if len(v.withoutNodes) > 0 {
		if without, err = selectNodes(cl, v.withoutNodes); err != nil {
			return err
		}
	}

	rep, _, err := judge(r, cl, cfg, now, writes, without, v.offline, marks)
	if err != nil {
		return err
	}

	if done, err := printReport(c, v.output, rep, v.streams.Out); done {
		if err != nil {
			return err
		}
	} else {
		v.printText(v.streams.Out, rep)
	}
	if len(rep.Violations) > 0 || len(rep.WouldFreeze) > 0 {
		return violationsFound
	}
	return nil
}

// judge lays writes over r, the replayed cluster, judging each as the
// webhook does, then checks the resulting tree whole and, with without,
// replays cl without those Nodes. It returns the report and the state
// after the writes (and without the Nodes).
func judge(r *replayer, cl *cluster, cfg events.Config, now time.Time, writes []quotafile.Write, without []string, offline bool, marks []v1beta1.CapacityStatus) (*ValidationReport, *state.State, error) {
	rep := &ValidationReport{TypeMeta: typeMeta("ValidationReport"), Offline: offline}
	var admitted []events.Event
	for _, w := range writes {
		if _, ok := r.s.Node(w.Name); !ok && w.Spec == nil {
			return nil, nil, notFound(w.Name)
		}
		a := r.s.Admit(w.Name, w.Spec)
		if !a.Allowed {
			rep.Violations = append(rep.Violations, Finding{Source: w.Source, Node: w.Name, Reason: "Denied", Message: a.Message})
			continue
		}
		ev := events.Deleted(now, events.KindAcceleratorQuota, w.Name)
		if w.Spec != nil {
			ev = events.QuotaUpserted(now, &events.Quota{Name: w.Name, Spec: *w.Spec})
		}
		r.apply(ev)
		admitted = append(admitted, ev)
	}
	sources := map[string]string{}
	for _, w := range writes {
		if w.Spec != nil {
			sources[w.Name] = w.Source
		}
	}
	known := map[string]bool{}
	for _, m := range marks {
		known[pairKey(m.ResourceName, m.ResourceFlavor)] = true
	}
	for _, vi := range r.s.Violations() {
		f := Finding{Source: sources[vi.Node], Node: vi.Node, Reason: string(vi.Reason), Message: vi.Message}
		if vi.Reason == state.ReasonCapacityExceeded {
			if offline && !known[vi.Subject] {
				continue // no mark given for the pair: capacity not judged
			}
			rep.Warnings = append(rep.Warnings, f)
			continue
		}
		rep.Violations = append(rep.Violations, f)
	}
	final := r.s
	before, after := r.s.Marks(), r.s.Marks()
	if len(without) > 0 {
		// The cluster replayed without those Nodes, measured once, with the
		// same writes laid over it: retiring them is one change of capacity.
		rep.WithoutNodes = without
		was := map[string]state.Status{}
		for _, n := range r.s.Nodes() {
			was[n.Name] = n.Status
		}
		gone := map[string]bool{}
		for _, name := range without {
			gone[name] = true
		}
		w := cl.replayWithout(cfg, now, gone)
		for _, ev := range admitted {
			w.apply(ev)
		}
		after, final = w.s.Marks(), w.s
		for _, n := range w.s.Nodes() {
			if n.Ready() || (was[n.Name].Reason == n.Reason && was[n.Name].Message == n.Message) {
				continue
			}
			rep.WouldFreeze = append(rep.WouldFreeze, Finding{Node: n.Name, Reason: string(n.Reason), Message: n.Message})
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(before), func(a, b state.Pair) int { return a.Compare(b) }) {
		if offline && !known[p.String()] {
			continue
		}
		m := MarkReport{Resource: p.Resource, Flavor: p.Flavor, HighWaterMark: before[p].String()}
		if len(without) > 0 {
			m.Without = after[p].String()
		}
		rep.Marks = append(rep.Marks, m)
	}
	return rep, final, nil
}

// offlineBase is the state that files are judged on offline: the
// configuration, every flavor the files or --capacity name, and a root
// Cohort carrying the --capacity marks (the files' own root replaces its
// spec when they hold one).
func offlineBase(cfg events.Config, now time.Time, writes []quotafile.Write, marks []v1beta1.CapacityStatus) *replayer {
	r := newReplayer(cfg, now)
	flavors := map[string]bool{}
	for _, w := range writes {
		if w.Spec != nil {
			for _, b := range w.Spec.Budgets {
				flavors[b.ResourceFlavor] = true
			}
		}
	}
	for _, m := range marks {
		flavors[m.ResourceFlavor] = true
	}
	for i := range marks {
		marks[i].ObservedAt = metav1.NewTime(now)
	}
	if cfg.Mode == events.ModeManagement {
		// A fleet: every flavor on every member, and the marks all on
		// the first one (the rules read their sum).
		names := slices.Sorted(maps.Keys(flavors))
		for i, m := range cfg.Members {
			var capacity []events.MemberCapacity
			if i == 0 {
				for _, c := range marks {
					capacity = append(capacity, events.MemberCapacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor, Allocatable: c.Allocatable, HighWaterMark: c.HighWaterMark})
				}
			}
			r.apply(events.MemberSeen(now, m, names, capacity))
		}
	}
	for _, f := range slices.Sorted(maps.Keys(flavors)) {
		r.apply(events.FlavorUpserted(now, &events.Flavor{Name: f}))
	}
	r.apply(events.QuotaUpserted(now, &events.Quota{Name: v1beta1.RootName,
		Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}, Capacity: marks}))
	return r
}

// selectNodes resolves --without-nodes: names must exist; a selector must
// match at least one Node.
func selectNodes(cl *cluster, vals []string) ([]string, error) {
	set := map[string]bool{}
	for _, val := range vals {
		if strings.ContainsAny(val, "=!") {
			sel, err := labels.Parse(val)
			if err != nil {
				return nil, fmt.Errorf("--without-nodes %q is not a valid label selector: %w", val, err)
			}
			n := 0
			for i := range cl.nodes {
				if sel.Matches(labels.Set(cl.nodes[i].Labels)) {
					set[cl.nodes[i].Name] = true
					n++
				}
			}
			if n == 0 {
				return nil, fmt.Errorf("no Nodes match the label selector %q given to --without-nodes", val)
			}
			continue
		}
		found := false
		for i := range cl.nodes {
			if cl.nodes[i].Name == val {
				found, set[val] = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("nodes %q not found: --without-nodes names Kubernetes Nodes (kubectl get nodes lists them)", val)
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

func (v *validateOptions) printText(w io.Writer, rep *ValidationReport) {
	p := palette(v.colorOn(w))
	var b strings.Builder
	where := func(f Finding) string {
		if f.Source != "" {
			return f.Node + " (" + f.Source + ")"
		}
		return f.Node
	}
	for _, f := range rep.Violations {
		if f.Reason == "Denied" {
			fmt.Fprintf(&b, "%s %s: %s\n", p.bad("denied"), where(f), f.Message)
		} else {
			fmt.Fprintf(&b, "%s %s %s: %s\n", p.bad("violation"), where(f), f.Reason, f.Message)
		}
	}
	for _, f := range rep.Warnings {
		fmt.Fprintf(&b, "%s %s: %s\n", p.warn("warning"), where(f), f.Message)
	}
	if len(rep.WithoutNodes) > 0 {
		fmt.Fprintf(&b, "Without %s:\n", strings.Join(rep.WithoutNodes, ", "))
		for _, m := range rep.Marks {
			if m.Without == m.HighWaterMark {
				fmt.Fprintf(&b, "  high-water mark %s stays at %s\n", pairKey(m.Resource, m.Flavor), m.HighWaterMark)
			} else {
				fmt.Fprintf(&b, "  high-water mark %s falls from %s to %s\n", pairKey(m.Resource, m.Flavor), m.HighWaterMark, m.Without)
			}
		}
		if len(rep.WouldFreeze) == 0 {
			b.WriteString("  no node would become CapacityExceeded or frozen\n")
		}
		for _, f := range rep.WouldFreeze {
			fmt.Fprintf(&b, "  %s would be %s: %s\n", f.Node, p.bad(f.Reason), f.Message)
		}
	}
	switch {
	case len(rep.Violations) > 0:
		fmt.Fprintf(&b, "%d violation(s): the webhook would deny these writes, or the tree breaks a rule\n", len(rep.Violations))
	case len(rep.WithoutNodes) == 0:
		b.WriteString(p.good("the tree keeps every rule") + "\n")
	}
	io.WriteString(w, b.String())
}
