package replay

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/store"
)

// VerdictEntry is one answer of the admission webhook found in a log.
type VerdictEntry struct {
	// Log is the position of the folder it was read from on the command
	// line: 0 for the first one, whose tree events are replayed.
	Log  int       `json:"log"`
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	events.Verdict
	// Changes are what the write asked to change, old -> new.
	Changes []string `json:"changes"`
}

// readVerdicts reads the verdicts of the log in dir, up to until (when not
// zero), for a merge: its other events are not replayed.
func readVerdicts(dir string, log int, until time.Time) ([]VerdictEntry, []store.Problem, error) {
	var out []VerdictEntry
	rep, err := store.Read(dir, 0, func(ev events.Event) error {
		if !until.IsZero() && ev.Time.After(until) {
			return errDone
		}
		if ev.Kind == events.KindVerdict {
			out = append(out, verdictEntry(log, ev))
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return nil, rep.Problems, fmt.Errorf("%s: %w", dir, err)
	}
	for i := range rep.Problems {
		rep.Problems[i].Segment = dir + ": " + rep.Problems[i].Segment
	}
	return out, rep.Problems, nil
}

func verdictEntry(log int, ev events.Event) VerdictEntry {
	return VerdictEntry{Log: log, Seq: ev.Seq, Time: ev.Time.UTC(), Node: ev.Key, Verdict: *ev.Verdict,
		Changes: specChanges(ev.Verdict.Old, ev.Verdict.New)}
}

// mergeVerdicts adds the verdicts of the other logs to r's, keeping each
// admission request (its uid) once: the first log's copy, else the
// earliest. r.Verdicts stays in the first log's order, the others' placed
// by time (see History).
func (r *Result) mergeVerdicts(others []VerdictEntry) {
	seen := map[string]bool{}
	for _, v := range r.Verdicts {
		seen[v.UID] = true
	}
	slices.SortStableFunc(others, func(a, b VerdictEntry) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Log, b.Log), cmp.Compare(a.Seq, b.Seq))
	})
	for _, v := range others {
		if v.UID != "" && seen[v.UID] {
			continue
		}
		seen[v.UID] = true
		r.foreign = append(r.foreign, v)
	}
}

// TrailStep is one line of a node's audit trail.
type TrailStep struct {
	// Log and Seq place the step: the folder on the command line (0, the
	// first, for every write and transition) and the event's number in it.
	Log  int       `json:"log"`
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// What is "verdict", "write" (the AcceleratorQuota as stored), or
	// "transition".
	What string `json:"what"`
	// Node is the node the step is about: the trail's node, or another one
	// whose transition the trail node's write caused.
	Node string `json:"node"`
	// User and Groups are a verdict's requesting user, as the review
	// names them, and a write's author: the user of the one admitted
	// verdict matched with it (see Authorship).
	User   string   `json:"user,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// A verdict's fields. Verdict is the webhook's answer, "admitted" or
	// "denied".
	Operation string `json:"operation,omitempty"`
	Verdict   string `json:"verdict,omitempty"`
	Replica   string `json:"replica,omitempty"`
	// Authorship is what the log makes of a verdict: "author" (its write
	// landed: Landed), "claimed" (admitted, but no write of the log is its
	// own), "contested" (its write landed, Landed, but another admitted
	// verdict of the same weight claims it too), "outweighed" (its write
	// landed, Landed, but a verdict of more weight claims it: see
	// attribute), "unverified" (the log cannot tell; Note says why) or
	// "request" (denied: it changed nothing).
	Authorship string `json:"authorship,omitempty"`
	Landed     uint64 `json:"landed,omitempty"`
	Note       string `json:"note,omitempty"`
	// Changes are a verdict's or a write's changes, old -> new.
	Changes []string `json:"changes,omitempty"`
	// A transition's phases; Message is a denial's or a transition's.
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Message string `json:"message,omitempty"`
	// Event names the write or the cause of a transition.
	Event string `json:"event,omitempty"`
	// Listed marks a write listed at a start rather than made then;
	// Unjudged a write that changed the spec with no admitted verdict of
	// the logs read matched with it (nor, where the log cannot tell, an
	// unverified one since the change before): made while the webhook
	// was off, or judged by a replica whose log was not given.
	Listed   bool `json:"listed,omitempty"`
	Unjudged bool `json:"unjudged,omitempty"`
	// ClaimedBy are, on a write that more than one admitted verdict
	// claims, those verdicts ("alice at 12"): it has no author.
	ClaimedBy []string `json:"claimedBy,omitempty"`

	// The event behind a write or a verdict step.
	write   *SpecChange
	verdict *VerdictEntry
}

// Trail is a node's audit trail: who asked to change it and what the
// webhook answered, the writes that were stored, and the transitions that
// followed, its own and those its writes caused in the rest of the tree.
type Trail struct {
	Node string `json:"node"`
	// Logs are the folders read, the first one replayed.
	Logs  []string    `json:"logs"`
	Steps []TrailStep `json:"steps"`
}

// Trail returns node's audit trail. The first log's steps are in its order;
// a verdict from another log (another replica's, or a log of verdicts)
// goes before the first step of the first log received at its time or
// after it, as a verdict comes before the write it allows (the logs'
// clocks are the replicas', so steps a few milliseconds apart on two
// replicas may show in either order).
func (r *Result) Trail(node string, logs []string) Trail {
	tr := Trail{Node: node, Logs: logs, Steps: []TrailStep{}}
	var own []TrailStep
	writes := map[uint64]bool{}
	for i, s := range r.Specs {
		if s.Node == node {
			writes[s.Seq] = true
			own = append(own, TrailStep{Seq: s.Seq, Time: s.Time, What: "write", Node: node, Changes: s.Changes, Event: s.Event, Listed: s.Listed,
				write: &r.Specs[i]})
		}
	}
	for i, v := range r.Verdicts {
		if v.Node == node {
			own = append(own, verdictStep(&r.Verdicts[i]))
		}
	}
	for _, e := range r.Timeline {
		if e.Node == node || writes[e.Seq] {
			own = append(own, TrailStep{Seq: e.Seq, Time: e.Time, What: "transition", Node: e.Node, From: string(e.From), To: string(e.To),
				Message: e.Message, Event: e.Cause})
		}
	}
	// Within one event: the verdict, the write, then its transitions.
	rank := map[string]int{"verdict": 0, "write": 1, "transition": 2}
	slices.SortStableFunc(own, func(a, b TrailStep) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(rank[a.What], rank[b.What]))
	})
	var foreign []TrailStep
	for i, v := range r.foreign {
		if v.Node == node {
			foreign = append(foreign, verdictStep(&r.foreign[i]))
		}
	}
	for _, s := range own {
		for len(foreign) > 0 && !foreign[0].Time.After(s.Time) {
			tr.Steps, foreign = append(tr.Steps, foreign[0]), foreign[1:]
		}
		tr.Steps = append(tr.Steps, s)
	}
	tr.Steps = append(tr.Steps, foreign...)
	attribute(tr.Steps)
	// A write that changed the spec should have an admitted verdict: one
	// matched with it, or, in a log that cannot tell (unverified), one
	// since the change before.
	judged := false
	for i := range tr.Steps {
		switch s := &tr.Steps[i]; s.What {
		case "verdict":
			judged = judged || s.Authorship == authorshipUnverified
		case "write":
			if len(s.Changes) > 0 {
				s.Unjudged = !s.Listed && !s.write.Unruled && !judged && s.User == "" && len(s.ClaimedBy) == 0
				judged = false
			}
		}
	}
	// Every version of an AcceleratorQuota is in the log, a status write's
	// too: the trail keeps those that changed the spec (and every listing
	// and deletion).
	tr.Steps = slices.DeleteFunc(tr.Steps, func(s TrailStep) bool {
		return s.What == "write" && s.write.Spec != nil && len(s.Changes) == 0 && !s.Listed && s.User == "" && len(s.ClaimedBy) == 0
	})
	return tr
}

func verdictStep(v *VerdictEntry) TrailStep {
	s := TrailStep{Log: v.Log, Seq: v.Seq, Time: v.Time, What: "verdict", Node: v.Node, User: v.User, Groups: v.Groups,
		Operation: v.Operation, Verdict: "admitted", Replica: v.Replica, Changes: v.Changes, Message: v.Message, verdict: v}
	if !v.Allowed {
		s.Verdict = "denied"
	}
	if len(v.Warnings) > 0 {
		s.Message = strings.Join(v.Warnings, "; ")
	}
	return s
}

func writeTrail(w io.Writer, tr Trail) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SEQ\tTIME\tWHO\t%s\n", tr.Node)
	for _, s := range tr.Steps {
		seq := fmt.Sprint(s.Seq)
		if s.Log > 0 {
			seq = fmt.Sprintf("%d:%d", s.Log, s.Seq)
		}
		who, what := "", ""
		switch s.What {
		case "verdict":
			who = s.User
			what = verdictText(s)
			if s.Message != "" {
				what += ": " + s.Message
			}
			if len(s.Changes) > 0 {
				what += " [" + strings.Join(s.Changes, "; ") + "]"
			}
		case "write":
			who = s.User // its author, when one verdict is matched with it
			what = strings.TrimPrefix(s.Event, fmt.Sprintf("#%d ", s.Seq))
			if len(s.Changes) > 0 {
				what += " [" + strings.Join(s.Changes, "; ") + "]"
			}
			switch {
			case s.Listed:
				what += " (listed at start)"
			case len(s.ClaimedBy) > 0:
				what += " (claimed by " + strings.Join(s.ClaimedBy, " and ") + ": author not established)"
			case s.Unjudged:
				what += " (no admitted verdict in the logs read matches it: written while the webhook was off, or judged by a replica whose log is not given)"
			}
		case "transition":
			what = fmt.Sprintf("%s %s -> %s", s.Node, s.From, s.To)
			if s.Message != "" && s.To != "Ready" {
				what += ": " + s.Message
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", seq, stampOf(s.Time), who, what)
	}
	if slices.ContainsFunc(tr.Steps, func(s TrailStep) bool { return s.Log > 0 }) {
		others := "the N-th other log"
		if slices.ContainsFunc(tr.Logs[1:], func(d string) bool {
			return filepath.Base(d) == store.VerdictsDir || filepath.Base(d) == store.AuthenticatedVerdictsDir
		}) {
			others = "the N-th other log (those given after the first, then the logs of verdicts inside each)"
		}
		fmt.Fprintf(tw, "(SEQ N:M is event M of %s; verdicts of one admission request are counted once)\n", others)
	}
	return tw.Flush()
}

// verdictText is a verdict as the trail prints it: "UPDATE admitted by a,
// landed as #12", "DELETE claimed, never landed (admitted by a)".
func verdictText(s TrailStep) string {
	by := ""
	if s.Replica != "" {
		by = " by " + s.Replica
	}
	switch s.Authorship {
	case authorshipRequest:
		return fmt.Sprintf("%s request denied%s", s.Operation, by)
	case authorshipAuthor:
		return fmt.Sprintf("%s admitted%s, landed as #%d", s.Operation, by, s.Landed)
	case authorshipClaimed:
		return fmt.Sprintf("%s claimed, never landed (admitted%s)", s.Operation, by)
	case authorshipOutweighed:
		return fmt.Sprintf("%s claimed, outweighed (admitted%s; #%d is another request's, whose verdict weighs more: authenticated, or the API server's record of the write)", s.Operation, by, s.Landed)
	case authorshipContested:
		return fmt.Sprintf("%s claimed, author not established (admitted%s; #%d is claimed by another verdict too)", s.Operation, by, s.Landed)
	case authorshipUnverified:
		return fmt.Sprintf("%s admitted%s, unverified (%s)", s.Operation, by, s.Note)
	}
	return fmt.Sprintf("%s %s%s", s.Operation, s.Verdict, by)
}

// specChanges says what a write changes in a node's spec, old -> new:
// its role, its parent, and each budget's amounts. A nil old is a
// creation, a nil new a deletion.
func specChanges(old, new *v1beta1.AcceleratorQuotaSpec) []string {
	var out []string
	switch {
	case old == nil && new == nil:
		return nil
	case new == nil:
		return []string{"deleted"}
	case old == nil:
		old = &v1beta1.AcceleratorQuotaSpec{}
		out = append(out, "created")
	}
	if old.Role != new.Role {
		out = append(out, fmt.Sprintf("role %s -> %s", orNone(string(old.Role)), orNone(string(new.Role))))
	}
	if p, q := parentOf(old), parentOf(new); p != q {
		out = append(out, fmt.Sprintf("parent %s -> %s", orNone(p), orNone(q)))
	}
	type key struct{ res, flavor string }
	olds := map[key]v1beta1.Budget{}
	for _, b := range old.Budgets {
		olds[key{b.ResourceName, b.ResourceFlavor}] = b
	}
	seen := map[key]bool{}
	for _, b := range new.Budgets {
		k := key{b.ResourceName, b.ResourceFlavor}
		seen[k] = true
		var nominal, borrowing, lending *resource.Quantity
		if o, had := olds[k]; had {
			nominal, borrowing, lending = &o.Nominal, o.BorrowingLimit, o.LendingLimit
		}
		name := state.Pair{Resource: b.ResourceName, Flavor: b.ResourceFlavor}.String()
		for _, f := range []struct {
			field    string
			from, to *resource.Quantity
		}{
			{"nominal", nominal, &b.Nominal},
			{"borrowingLimit", borrowing, b.BorrowingLimit},
			{"lendingLimit", lending, b.LendingLimit},
		} {
			if a, z := amountOf(f.from), amountOf(f.to); a != z {
				out = append(out, fmt.Sprintf("%s %s %s -> %s", name, f.field, a, z))
			}
		}
	}
	for _, b := range old.Budgets {
		if !seen[key{b.ResourceName, b.ResourceFlavor}] {
			out = append(out, fmt.Sprintf("%s@%s removed (nominal was %s)", b.ResourceName, b.ResourceFlavor, b.Nominal.String()))
		}
	}
	out = append(out, goneChanges(old.GoneClusters, new.GoneClusters)...)
	if len(out) > 0 && out[0] == "created" {
		// A creation lists what was set: "role ClusterQueue".
		for i := range out {
			out[i] = strings.Replace(out[i], " <none> -> ", " ", 1)
		}
	}
	return out
}

// goneChanges says which clusters a write declares gone (root's
// spec.goneClusters), or takes back: "goneClusters +west (force)",
// "goneClusters -west".
func goneChanges(old, new []v1beta1.GoneCluster) []string {
	var out []string
	force := func(g v1beta1.GoneCluster) string {
		if g.Force {
			return " (force)"
		}
		return ""
	}
	for _, g := range new {
		i := slices.IndexFunc(old, func(o v1beta1.GoneCluster) bool { return o.Name == g.Name })
		switch {
		case i < 0:
			out = append(out, "goneClusters +"+g.Name+force(g))
		case old[i].Force != g.Force:
			out = append(out, fmt.Sprintf("goneClusters %s force %t -> %t", g.Name, old[i].Force, g.Force))
		}
	}
	for _, g := range old {
		if !slices.ContainsFunc(new, func(n v1beta1.GoneCluster) bool { return n.Name == g.Name }) {
			out = append(out, "goneClusters -"+g.Name)
		}
	}
	return out
}

func parentOf(s *v1beta1.AcceleratorQuotaSpec) string {
	if s.ParentRef == nil {
		return ""
	}
	return s.ParentRef.Name
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// amountOf prints an optional amount: "<none>" when unset.
func amountOf(q *resource.Quantity) string {
	if q == nil {
		return "<none>"
	}
	return q.String()
}
