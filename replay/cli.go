package replay

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/quotafile"
	"ome.io/quota-manager/state"
)

// ReportVersion is the version of the JSON reports (-o json).
const ReportVersion = "replay.ome.io/v1alpha1"

// usage is the command's help text.
const usage = `Replays a recorded event log offline and explains the state it produced.

Usage:
  ome-quota-manager replay DIR [flags]
  ome-quota-manager replay DIR [DIR...] --node NAME --history

Views (one at a time; the timeline by default):
  (none)              every transition: seq, time, node, from -> to, reason, cause
  --node NAME         one node's transitions, the writes of its AcceleratorQuota
                      and the leader's reports on its Kueue objects
  --node NAME --history
                      the node's audit trail: each write's requesting user and
                      the webhook's verdict (admitted, or denied and why), the
                      change (budgets, parent, role, old -> new), the write as
                      stored, and the transitions that followed. A user is
                      the author of a write only when their admitted verdict
                      matches it (same object, version and spec); others
                      show as claimed, never landed. Every replica
                      judges writes: give each replica's folder, the first is
                      replayed and the others add their verdicts
  --why NAME          the chain from the node's state back to the input behind it
  --state             the whole state (tree, marks, nodes, who led) at the end or
                      at --at, and every node's status as the leader writes it
                      from that state (Materialized from the applier's outcomes)
  --objects           the Kueue objects the projector wants at the end or at --at
  -f FILE, --delete NAME
                      what a change would have done at the end or at --at: the
                      files' AcceleratorQuotas laid over the tree as kubectl apply
                      writes them, then the deletions, each judged by the rule
                      book; the budgets that change and each team's admitted
                      usage left above its new budget, as the log recorded its
                      ClusterQueue's usage (the log holds no Workloads: which
                      ones, and what Kueue would reclaim, is kubectl ome quota
                      plan's, on the live cluster)

Examples:
  # Why is big-team frozen?
  ome-quota-manager replay /var/lib/ome/events --why big-team
  # The tree as it was just before event 1200
  ome-quota-manager replay /var/lib/ome/events --at 1199 --state
  # Who changed team-alpha, and what did the webhook answer? (two replicas)
  ome-quota-manager replay /logs/replica-0 /logs/replica-1 --node team-alpha --history
  # What would a 5% hysteresis have changed?
  ome-quota-manager replay /var/lib/ome/events --capacity-hysteresis-percent 5
  # Had team-beta been lowered just before event 1200, whose usage was above budget?
  ome-quota-manager replay /var/lib/ome/events --at 1199 -f lower-beta.yaml

Flags:
`

// cliFlags are the values of the replay command's flags, once parsed.
type cliFlags struct {
	node      *string
	history   *bool
	why       *string
	at        *string
	showState *bool
	objects   *bool
	output    *string
	depth     *int
	hyst      *int
	measured  *[]string
	enrolled  *[]string
	files     *[]string
	deletes   *[]string
}

// FlagSet returns the replay command's flags, unparsed, with their
// defaults and help, as Main defines them (the docs' tests read it).
func FlagSet() *pflag.FlagSet {
	fs, _ := newFlagSet(io.Discard)
	return fs
}

func newFlagSet(stderr io.Writer) (*pflag.FlagSet, *cliFlags) {
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	f := &cliFlags{}
	f.node = fs.String("node", "", "show one node's history")
	f.history = fs.Bool("history", false, "with --node: the node's audit trail (verdicts, writes, what followed), merged across the folders given")
	f.why = fs.String("why", "", "explain one node's state")
	f.at = fs.String("at", "", "stop after this event: a sequence number, or an RFC 3339 time")
	f.showState = fs.Bool("state", false, "print the state")
	f.objects = fs.Bool("objects", false, "print the Kueue objects the projector would write")
	f.output = fs.StringP("output", "o", "text", "text or json")
	f.depth = fs.Int("max-tree-depth", 0, "what-if: replay with this --max-tree-depth")
	f.hyst = fs.Int("capacity-hysteresis-percent", 0, "what-if: replay with this hysteresis")
	f.measured = fs.StringSlice("capacity-resources", nil, "what-if: replay measuring these resources")
	f.enrolled = fs.StringSlice("enrolled-namespaces", nil, "what-if: replay with these enrolled namespaces (changes --objects)")
	f.files = fs.StringSliceP("filename", "f", nil, "what-if: files, folders or - of AcceleratorQuotas to lay over the tree at the end or at --at")
	f.deletes = fs.StringSlice("delete", nil, "what-if: nodes to delete after the files")
	return fs, f
}

// Main runs the replay command with args (after "replay") and returns its
// exit code: 0 done, 1 the log could not be read, 2 bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	fs, f := newFlagSet(stderr)
	node, history, why, at, showState, objects, output, depth, hyst, measured, enrolled, files, deletes := f.node, f.history, f.why, f.at, f.showState, f.objects, f.output, f.depth, f.hyst, f.measured, f.enrolled, f.files, f.deletes
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "replay: "+format+"\n", a...)
		return code
	}
	if fs.NArg() == 0 {
		return fail(2, "give the event log folder; see --help")
	}
	if *history && *node == "" {
		return fail(2, "--history is a view of one node: give --node NAME")
	}
	if fs.NArg() > 1 && !*history {
		return fail(2, "%d folders given: only --node NAME --history reads more than one (the verdicts of every replica); other views replay one log", fs.NArg())
	}
	if *output != "text" && *output != "json" {
		return fail(2, "-o must be text or json, got %q", *output)
	}
	planning := len(*files) > 0 || len(*deletes) > 0
	views := 0
	for _, v := range []bool{*node != "", *why != "", *showState, *objects, planning} {
		if v {
			views++
		}
	}
	if views > 1 {
		return fail(2, "--node, --why, --state, --objects and -f/--delete are separate views: pick one")
	}
	var o Options
	if *at != "" {
		if n, err := strconv.ParseUint(*at, 10, 64); err == nil {
			o.AtSeq = n
		} else if t, err := time.Parse(time.RFC3339, *at); err == nil {
			o.AtTime = t
		} else {
			return fail(2, "--at %q is neither a sequence number nor an RFC 3339 time such as 2026-11-30T03:12:00Z", *at)
		}
	}
	if fs.Changed("max-tree-depth") {
		if *depth < 0 {
			return fail(2, "--max-tree-depth must be 0 (no limit) or more, got %d", *depth)
		}
		o.WhatIf.MaxTreeDepth = depth
	}
	if fs.Changed("capacity-hysteresis-percent") {
		if *hyst < 0 || *hyst > 100 {
			return fail(2, "--capacity-hysteresis-percent must be between 0 and 100, got %d", *hyst)
		}
		o.WhatIf.HysteresisPercent = hyst
	}
	if fs.Changed("capacity-resources") {
		if len(*measured) == 0 {
			return fail(2, "--capacity-resources must name at least one resource")
		}
		o.WhatIf.MeasuredResources = *measured
	}
	if fs.Changed("enrolled-namespaces") {
		o.WhatIf.EnrolledNamespaces = *enrolled
		if o.WhatIf.EnrolledNamespaces == nil {
			o.WhatIf.EnrolledNamespaces = []string{}
		}
	}
	var writes []quotafile.Write
	if planning {
		var err error
		if writes, err = quotafile.Read(*files, os.Stdin, "replay"); err != nil {
			return fail(2, "%v", err)
		}
		for _, d := range *deletes {
			writes = append(writes, quotafile.Write{Name: d})
		}
	}
	dir := fs.Arg(0)
	o.Objects = *objects || planning
	o.Others = fs.Args()[1:]
	res, err := Run(dir, o)
	if err != nil {
		return fail(1, "%v", err)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(stderr, "replay: warning: %s\n", p)
	}
	var out any
	var text func(w io.Writer) error
	switch {
	case *history:
		tr := res.Trail(*node, res.Logs())
		out, text = tr, func(w io.Writer) error { return writeTrail(w, tr) }
	case *node != "":
		h := res.History(*node)
		out, text = h, func(w io.Writer) error { return writeHistory(w, h) }
	case *why != "":
		steps, err := res.Why(*why)
		if err != nil {
			return fail(1, "%v", err)
		}
		out, text = steps, func(w io.Writer) error {
			for _, s := range steps {
				if _, err := fmt.Fprintln(w, s.What); err != nil {
					return err
				}
			}
			return nil
		}
	case *showState:
		v := res.StateView()
		out, text = v, func(w io.Writer) error { return writeState(w, v) }
	case *objects:
		objs := res.Objects()
		out, text = objs, func(w io.Writer) error { return writeObjects(w, objs) }
	case planning:
		p, err := res.Plan(writes)
		if err != nil {
			return fail(1, "%v", err)
		}
		out, text = p, func(w io.Writer) error { return writePlan(w, p) }
	case !o.WhatIf.IsZero():
		recorded, err := Run(dir, Options{AtSeq: o.AtSeq, AtTime: o.AtTime})
		if err != nil {
			return fail(1, "%v", err)
		}
		d := Compare(recorded.Timeline, res.Timeline)
		out, text = d, func(w io.Writer) error { return writeDiff(w, d) }
	default:
		out, text = res.Timeline, func(w io.Writer) error { return writeTimeline(w, res.Timeline) }
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(map[string]any{"apiVersion": ReportVersion, "last": res.Last, "items": out})
	} else {
		err = text(stdout)
	}
	if err != nil {
		return fail(1, "writing the output: %v", err)
	}
	return 0
}

// History is one node's story: its transitions and the writes of its
// AcceleratorQuota, merged in log order.
type History struct {
	Node        string       `json:"node"`
	Transitions []Entry      `json:"transitions"`
	Writes      []SpecChange `json:"writes"`
	// Outcomes are the leader's applier's reports on the node.
	Outcomes []OutcomeEntry `json:"outcomes"`
}

// History returns node's history.
func (r *Result) History(node string) History {
	h := History{Node: node, Transitions: []Entry{}, Writes: []SpecChange{}, Outcomes: []OutcomeEntry{}}
	for _, e := range r.Timeline {
		if e.Node == node {
			h.Transitions = append(h.Transitions, e)
		}
	}
	for _, s := range r.Specs {
		if s.Node == node {
			h.Writes = append(h.Writes, s)
		}
	}
	for _, o := range r.Outcomes {
		if o.Node == node {
			h.Outcomes = append(h.Outcomes, o)
		}
	}
	return h
}

func stampOf(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func writeTimeline(w io.Writer, entries []Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tNODE\tFROM\tTO\tCAUSE\tMESSAGE")
	for _, e := range entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, stampOf(e.Time), e.Node, e.From, e.To, e.Cause, e.Message)
	}
	return tw.Flush()
}

func writeHistory(w io.Writer, h History) error {
	type line struct {
		seq  uint64
		text string
	}
	var lines []line
	for _, e := range h.Transitions {
		msg := ""
		if e.Message != "" && e.To != state.PhaseReady {
			msg = ": " + e.Message
		}
		lines = append(lines, line{e.Seq, fmt.Sprintf("%d\t%s\t%s -> %s%s", e.Seq, stampOf(e.Time), e.From, e.To, msg)})
	}
	for _, s := range h.Writes {
		lines = append(lines, line{s.Seq, fmt.Sprintf("%d\t%s\t%s", s.Seq, stampOf(s.Time), strings.TrimPrefix(s.Event, fmt.Sprintf("#%d ", s.Seq)))})
	}
	for _, o := range h.Outcomes {
		lines = append(lines, line{o.Seq, fmt.Sprintf("%d\t%s\t%s", o.Seq, stampOf(o.Time), strings.TrimPrefix(o.Event, fmt.Sprintf("#%d ", o.Seq)))})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.seq, b.seq) })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SEQ\tTIME\t%s\n", h.Node)
	for _, l := range lines {
		fmt.Fprintln(tw, l.text)
	}
	return tw.Flush()
}

func writeObjects(w io.Writer, out Objects) error {
	for _, group := range []any{out.Cohorts, out.ClusterQueues, out.LocalQueues} {
		b, err := yaml.Marshal(group)
		if err != nil {
			return err
		}
		if string(b) == "[]\n" {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s", b); err != nil {
			return err
		}
	}
	return nil
}

// Diff is what a what-if replay changes in the timeline.
type Diff struct {
	// OnlyRecorded are transitions of the recorded run that the what-if run
	// does not make; OnlyWhatIf the reverse.
	OnlyRecorded []Entry `json:"onlyRecorded"`
	OnlyWhatIf   []Entry `json:"onlyWhatIf"`
}

// Compare returns the transitions that differ between two runs of one log,
// matched by sequence number, node and phase entered.
func Compare(recorded, whatIf []Entry) Diff {
	key := func(e Entry) string { return fmt.Sprintf("%d/%s/%s/%s", e.Seq, e.Node, e.From, e.To) }
	inA := map[string]bool{}
	for _, e := range recorded {
		inA[key(e)] = true
	}
	inB := map[string]bool{}
	for _, e := range whatIf {
		inB[key(e)] = true
	}
	d := Diff{OnlyRecorded: []Entry{}, OnlyWhatIf: []Entry{}}
	for _, e := range recorded {
		if !inB[key(e)] {
			d.OnlyRecorded = append(d.OnlyRecorded, e)
		}
	}
	for _, e := range whatIf {
		if !inA[key(e)] {
			d.OnlyWhatIf = append(d.OnlyWhatIf, e)
		}
	}
	return d
}

func writeDiff(w io.Writer, d Diff) error {
	if len(d.OnlyRecorded) == 0 && len(d.OnlyWhatIf) == 0 {
		_, err := fmt.Fprintln(w, "no transition differs from the recorded run")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tSEQ\tTIME\tNODE\tFROM\tTO\tMESSAGE")
	for _, e := range d.OnlyRecorded {
		fmt.Fprintf(tw, "-\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, stampOf(e.Time), e.Node, e.From, e.To, e.Message)
	}
	for _, e := range d.OnlyWhatIf {
		fmt.Fprintf(tw, "+\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, stampOf(e.Time), e.Node, e.From, e.To, e.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "(- only in the recorded run, + only with the what-if flags)")
	return err
}
