package webhook

import "ome.io/quota-manager/state"

// usageWarnings is Reviewer.Warn for the manager: the rule book's
// warnings of an admitted write that lowers a team's budget below what
// Kueue has admitted for it (state.LoweringWarnings), read from the state
// under the reducer's lock. Kueue does not evict those Workloads, so the
// write is admitted; kubectl apply prints the warning.
func usageWarnings(st StateReader) func(Write) []string {
	return func(w Write) []string {
		if w.Spec == nil {
			return nil
		}
		var out []string
		st.Observe(func(s *state.State) { out = s.LoweringWarnings(w.Name, w.Old, w.Spec) })
		return out
	}
}

// warned is v with Warn's warnings added when v admits the write.
func (r *Reviewer) warned(v Verdict, w Write) Verdict {
	if v.Allowed && r.Warn != nil {
		v.Warnings = append(v.Warnings, r.Warn(w)...)
	}
	return v
}
