package replay

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
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
	// A verdict's fields.
	User      string   `json:"user,omitempty"`
	Groups    []string `json:"groups,omitempty"`
	Operation string   `json:"operation,omitempty"`
	Verdict   string   `json:"verdict,omitempty"`
	Replica   string   `json:"replica,omitempty"`
	// Changes are a verdict's or a write's changes, old -> new.
	Changes []string `json:"changes,omitempty"`
	// A transition's phases; Message is a denial's or a transition's.
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Message string `json:"message,omitempty"`
	// Event names the write or the cause of a transition.
	Event string `json:"event,omitempty"`
	// Listed marks a write listed at a start rather than made then;
	// Unjudged a write with no admitted verdict before it in the logs
	// read: made while the webhook was off, or judged by a replica whose
	// log was not given.
	Listed   bool `json:"listed,omitempty"`
	Unjudged bool `json:"unjudged,omitempty"`
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
// a verdict from another log goes before the first step of the first log
// received after it (the logs' clocks are the replicas', so steps a few
// milliseconds apart on two replicas may show in either order).
func (r *Result) Trail(node string, logs []string) Trail {
	tr := Trail{Node: node, Logs: logs, Steps: []TrailStep{}}
	var own []TrailStep
	writes := map[uint64]bool{}
	for _, s := range r.Specs {
		if s.Node == node {
			writes[s.Seq] = true
			own = append(own, TrailStep{Seq: s.Seq, Time: s.Time, What: "write", Node: node, Changes: s.Changes, Event: s.Event, Listed: s.Listed})
		}
	}
	landed := r.landings(node)
	for _, v := range r.Verdicts {
		if v.Node == node {
			own = append(own, verdictStep(v, landed))
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
	for _, v := range r.foreign {
		if v.Node == node {
			foreign = append(foreign, verdictStep(v, landed))
		}
	}
	for _, s := range own {
		for len(foreign) > 0 && foreign[0].Time.Before(s.Time) {
			tr.Steps, foreign = append(tr.Steps, foreign[0]), foreign[1:]
		}
		tr.Steps = append(tr.Steps, s)
	}
	tr.Steps = append(tr.Steps, foreign...)
	// A write that changed the spec should follow an admitted verdict.
	judged := false
	for i := range tr.Steps {
		switch s := &tr.Steps[i]; s.What {
		case "verdict":
			judged = judged || s.Verdict == verdictAdmitted
		case "write":
			s.Unjudged = !s.Listed && !judged && len(s.Changes) > 0
			judged = false
		}
	}
	return tr
}

// Verdicts of the trail. A review names its user as the author of a
// change only when the change the log then holds is the one it admitted:
// anyone who reaches the webhook's port can send a review naming anyone.
const (
	verdictAdmitted = "admitted"
	verdictDenied   = "denied"
	// verdictClaimed: admitted, but no write of the log is the one it
	// admitted (or another admitted verdict claims the same write).
	verdictClaimed = "claimed, never seen to land"
)

// landings says, for each admitted verdict of node (by log and sequence
// number), whether exactly one write of the log is the one it admitted: a
// CREATE's object with its uid and spec; an UPDATE's next version after its
// base, same uid and spec; a DELETE of its base. A write claimed by two
// verdicts is the author's of neither.
func (r *Result) landings(node string) map[[2]uint64]bool {
	matches := func(v VerdictEntry, s SpecChange) bool {
		if v.ObjectUID == "" || (v.Log == 0 && s.Seq < v.Seq) {
			return false
		}
		base, _ := strconv.ParseUint(v.Base, 10, 64)
		switch v.Operation {
		case "CREATE":
			return s.UID == v.ObjectUID && s.Spec != nil && s.Prev == 0 && apiequality.Semantic.DeepEqual(s.Spec, v.New)
		case "UPDATE":
			return s.UID == v.ObjectUID && s.Spec != nil && base != 0 && s.Prev == base && apiequality.Semantic.DeepEqual(s.Spec, v.New)
		case "DELETE":
			return s.Spec == nil && s.PrevUID == v.ObjectUID && base != 0 && s.Prev == base
		}
		return false
	}
	claims := map[uint64][][2]uint64{}
	for _, v := range append(slices.Clone(r.Verdicts), r.foreign...) {
		if v.Node != node || !v.Allowed {
			continue
		}
		for _, s := range r.Specs {
			if s.Node == node && matches(v, s) {
				claims[s.Seq] = append(claims[s.Seq], [2]uint64{uint64(v.Log), v.Seq})
				break
			}
		}
	}
	out := map[[2]uint64]bool{}
	for _, by := range claims {
		if len(by) == 1 {
			out[by[0]] = true
		}
	}
	return out
}

func verdictStep(v VerdictEntry, landed map[[2]uint64]bool) TrailStep {
	s := TrailStep{Log: v.Log, Seq: v.Seq, Time: v.Time, What: "verdict", Node: v.Node, User: v.User, Groups: v.Groups,
		Operation: v.Operation, Verdict: verdictAdmitted, Replica: v.Replica, Changes: v.Changes, Message: v.Message}
	switch {
	case !v.Allowed:
		s.Verdict = verdictDenied
	case !landed[[2]uint64{uint64(v.Log), v.Seq}]:
		s.Verdict = verdictClaimed
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
			what = fmt.Sprintf("%s %s", s.Operation, s.Verdict)
			if s.Replica != "" {
				what += " by " + s.Replica
			}
			if s.Message != "" {
				what += ": " + s.Message
			}
			if len(s.Changes) > 0 {
				what += " [" + strings.Join(s.Changes, "; ") + "]"
			}
		case "write":
			what = strings.TrimPrefix(s.Event, fmt.Sprintf("#%d ", s.Seq))
			if len(s.Changes) > 0 {
				what += " [" + strings.Join(s.Changes, "; ") + "]"
			}
			switch {
			case s.Listed:
				what += " (listed at start)"
			case s.Unjudged:
				what += " (no admitted verdict in the logs read: written while the webhook was off, or judged by a replica whose log is not given)"
			}
		case "transition":
			what = fmt.Sprintf("%s %s -> %s", s.Node, s.From, s.To)
			if s.Message != "" && s.To != "Ready" {
				what += ": " + s.Message
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", seq, stampOf(s.Time), who, what)
	}
	if len(tr.Logs) > 1 {
		fmt.Fprintln(tw, "(SEQ N:M is event M of the N-th other log; verdicts of one admission request are counted once)")
	}
	return tw.Flush()
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
		name := b.ResourceName + "@" + b.ResourceFlavor
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
	if len(out) > 0 && out[0] == "created" {
		// A creation lists what was set: "role ClusterQueue".
		for i := range out {
			out[i] = strings.Replace(out[i], " <none> -> ", " ", 1)
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
