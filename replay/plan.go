package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/impact"
	"ome.io/quota-manager/kueuesim"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/quotafile"
	"ome.io/quota-manager/state"
)

// Plan is what a change would have done at a moment of the log: the rule
// book's verdict on each write, the rules the tree would then break, and
// the impact on the admitted usage the log recorded.
type Plan struct {
	// Seq is the last event replayed: the moment judged.
	Seq uint64 `json:"seq"`
	// Denied are the writes the webhook would have refused; Violations
	// the rules the resulting tree breaks, Warnings the budgets above
	// capacity.
	Denied     []PlanFinding  `json:"denied,omitempty"`
	Violations []PlanFinding  `json:"violations,omitempty"`
	Warnings   []PlanFinding  `json:"warnings,omitempty"`
	Impact     *impact.Report `json:"impact"`
}

// PlanFinding is one denial, violation or warning.
type PlanFinding struct {
	Source  string `json:"source,omitempty"`
	Node    string `json:"node"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// Plan lays writes over the state the replay ended in, as kubectl apply
// would write them, each judged by the rule book (State.Admit), and
// reports the change's impact. The log holds each team's admitted totals
// (its ClusterQueue's status) but not the Workloads, so the report has
// the amounts above budget and not which Workloads, what lenders would
// reclaim, or what would be admitted.
func (r *Result) Plan(writes []quotafile.Write) (*Plan, error) {
	before, after := r.State.Clone(), r.State.Clone()
	p := &Plan{Seq: r.Last}
	seq := r.Last
	for _, w := range writes {
		if _, ok := after.Node(w.Name); !ok && w.Spec == nil {
			return nil, fmt.Errorf("--delete %s: the log holds no node %s at event %d", w.Name, w.Name, r.Last)
		}
		if a := after.Admit(w.Name, w.Spec); !a.Allowed {
			p.Denied = append(p.Denied, PlanFinding{Source: w.Source, Node: w.Name, Reason: "Denied", Message: a.Message})
			continue
		}
		ev := events.Deleted(r.LastTime, events.KindAcceleratorQuota, w.Name)
		if w.Spec != nil {
			ev = events.QuotaUpserted(r.LastTime, &events.Quota{Name: w.Name, Spec: *w.Spec})
		}
		seq++
		ev.Seq = seq
		after.Apply(ev)
	}
	for _, v := range after.Violations() {
		f := PlanFinding{Node: v.Node, Reason: string(v.Reason), Message: v.Message}
		if v.Reason == state.ReasonCapacityExceeded {
			p.Warnings = append(p.Warnings, f)
		} else {
			p.Violations = append(p.Violations, f)
		}
	}
	live, err := r.kueueObjects()
	if err != nil {
		return nil, err
	}
	cfg := r.State.Config()
	p.Impact, err = impact.Compute(impact.Input{
		Before: before, After: after,
		Settings: impact.Settings{Enrolled: projector.Namespaces(cfg.EnrolledNamespaces), Cover: projector.CoverResources(cfg.CoverResources)},
		Live:     live,
		Now:      r.LastTime,
	})
	return p, err
}

// kueueObjects are the Cohorts and ClusterQueues the manager would have
// left at the end of the replay (Options.Objects), as Kueue's types.
func (r *Result) kueueObjects() (kueuesim.Objects, error) {
	var out kueuesim.Objects
	objs := r.Objects()
	for _, c := range objs.Cohorts {
		var co kueue.Cohort
		if err := convert(c, &co); err != nil {
			return out, err
		}
		out.Cohorts = append(out.Cohorts, co)
	}
	for _, c := range objs.ClusterQueues {
		var cq kueue.ClusterQueue
		if err := convert(c, &cq); err != nil {
			return out, err
		}
		out.ClusterQueues = append(out.ClusterQueues, cq)
	}
	return out, nil
}

func convert(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

func writePlan(w io.Writer, p *Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "At event %d:\n", p.Seq)
	for _, f := range p.Denied {
		where := f.Node
		if f.Source != "" {
			where += " (" + f.Source + ")"
		}
		fmt.Fprintf(&b, "denied %s: %s\n", where, f.Message)
	}
	for _, f := range p.Violations {
		fmt.Fprintf(&b, "violation %s %s: %s\n", f.Node, f.Reason, f.Message)
	}
	for _, f := range p.Warnings {
		fmt.Fprintf(&b, "warning %s: %s\n", f.Node, f.Message)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return impact.WriteText(w, p.Impact, impact.Style{})
}
