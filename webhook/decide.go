package webhook

import (
	"net/http"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// Inputs are a whole tree and what else the rule book reads, for judging a
// write from scratch (Decide): tests, and tools that hold a tree rather
// than the manager's state.
type Inputs struct {
	Tree    state.Tree
	Marks   map[state.Pair]state.Amount
	Flavors map[string]bool
	Config  events.Config
}

// Verdict is the answer to one write.
type Verdict struct {
	Allowed bool
	// Code is the HTTP-style code of a denial: 403 for a rule, 400 for a
	// malformed request, 503 while the answer cannot be known yet.
	Code int32
	// Message says why a write is denied; it is empty when it is allowed.
	Message string
	// Denied are the violations that the write adds or makes worse.
	Denied []state.Violation
	// Warnings go back to the client with an admitted write; kubectl
	// prints them as "Warning: ...".
	Warnings []string
}

// Decide judges writing spec to node name, or deleting it when spec is nil,
// on a whole tree with the core's rule book (state.Admit), from scratch.
// The webhook itself judges from the manager's state (state.State.Admit),
// which gives the same answers.
func Decide(in *Inputs, name string, spec *v1beta1.AcceleratorQuotaSpec) Verdict {
	return verdictOf(state.Admit(in.Tree, in.Marks, in.Flavors, in.Config, name, spec))
}

// verdictOf is the webhook's form of the rule book's answer: a denial is a
// 403.
func verdictOf(a state.Admission) Verdict {
	if a.Allowed {
		return Verdict{Allowed: true, Warnings: a.Warnings}
	}
	return Verdict{Code: http.StatusForbidden, Message: a.Message, Denied: a.Denied}
}
