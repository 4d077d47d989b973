package quotactl

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"ome.io/quota-manager/impact"
)

// ReportGroupVersion versions the reports that -o json|yaml prints. They
// are the plugin's own documents, not API objects stored in a cluster.
var ReportGroupVersion = schema.GroupVersion{Group: "kubectl-ome.ome.io", Version: "v1alpha1"}

// TreeReport is `kubectl ome quota tree -o json|yaml`.
type TreeReport struct {
	metav1.TypeMeta `json:",inline"`
	// Capacity is root's measurement, with the age of each figure.
	Capacity []CapacityReport `json:"capacity,omitempty"`
	// Tree is the node asked for (root by default) with its descendants.
	Tree *NodeReport `json:"tree"`
	// Unreachable lists nodes that do not reach root (a missing parent or
	// a loop of parentRefs), when the whole tree is printed.
	Unreachable []*NodeReport `json:"unreachable,omitempty"`
}

// CapacityReport is one pair of root's status.capacity.
type CapacityReport struct {
	Resource      string      `json:"resource"`
	Flavor        string      `json:"flavor"`
	Allocatable   string      `json:"allocatable"`
	HighWaterMark string      `json:"highWaterMark"`
	ObservedAt    metav1.Time `json:"observedAt"`
	// Age is how long ago ObservedAt was, when the report was made.
	Age string `json:"age"`
	// Members are, on a management plane, each member cluster's part.
	Members []MemberCapacityReport `json:"members,omitempty"`
}

// MemberCapacityReport is one member cluster's capacity of a pair, on a
// management plane.
type MemberCapacityReport struct {
	Cluster       string `json:"cluster"`
	Allocatable   string `json:"allocatable"`
	HighWaterMark string `json:"highWaterMark"`
}

// ShareReport is one member cluster's share of a fleet budget, on a
// management plane.
type ShareReport struct {
	Cluster string `json:"cluster"`
	Nominal string `json:"nominal"`
}

// NodeReport is one node of the tree.
type NodeReport struct {
	Name    string         `json:"name"`
	Role    string         `json:"role"`
	Parent  string         `json:"parent,omitempty"`
	Budgets []BudgetReport `json:"budgets,omitempty"`
	// Ready and Materialized are the node's conditions as the manager
	// reported them; Materialized is absent while no namespace is enrolled.
	Ready        *ConditionReport `json:"ready,omitempty"`
	Materialized *ConditionReport `json:"materialized,omitempty"`
	// FrozenBy is the nearest ancestor that breaks a rule, for a frozen
	// node, and FrozenReason the rule.
	FrozenBy     string        `json:"frozenBy,omitempty"`
	FrozenReason string        `json:"frozenReason,omitempty"`
	Children     []*NodeReport `json:"children,omitempty"`
}

// BudgetReport is one budget with its usage.
type BudgetReport struct {
	Resource       string `json:"resource"`
	Flavor         string `json:"flavor"`
	Nominal        string `json:"nominal"`
	BorrowingLimit string `json:"borrowingLimit,omitempty"`
	LendingLimit   string `json:"lendingLimit,omitempty"`
	// Admitted, Reserved and Borrowed are a team's usage, from its status.
	Admitted string `json:"admitted,omitempty"`
	Reserved string `json:"reserved,omitempty"`
	Borrowed string `json:"borrowed,omitempty"`
	// Shares are, on a management plane, each member cluster's share of
	// a team's budget, from its status.
	Shares []ShareReport `json:"shares,omitempty"`
}

// ConditionReport is one condition.
type ConditionReport struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// StatusReport is `kubectl ome quota status NODE -o json|yaml`.
type StatusReport struct {
	metav1.TypeMeta `json:",inline"`
	Node            NodeReport         `json:"node"`
	Conditions      []metav1.Condition `json:"conditions,omitempty"`
	// Causes is the chain from the node up to the node whose own rule froze
	// it: each a node with its reason and message.
	Causes []CauseReport `json:"causes,omitempty"`
	// Objects are the Kueue objects written for the node; on a management
	// plane, Copies are its copies on the member clusters instead.
	Objects []ObjectReport `json:"objects,omitempty"`
	Copies  []CopyReport   `json:"copies,omitempty"`
	// Budgets compares each budget with its parent's and the mark.
	Budgets []BudgetCheck `json:"budgets,omitempty"`
	// Admission is, for root, what the admission webhook said of itself.
	Admission *AdmissionReport `json:"admission,omitempty"`
}

// AdmissionReport is what the webhook's replicas wrote on its
// ValidatingWebhookConfiguration: whether its callers are authenticated,
// and whether its NetworkPolicy still admits the API server. Error says
// why they could not be read.
type AdmissionReport struct {
	Callers       string `json:"callers,omitempty"`
	NetworkPolicy string `json:"networkPolicy,omitempty"`
	Error         string `json:"error,omitempty"`
}

// CauseReport is one link of a chain of causes.
type CauseReport struct {
	Node    string `json:"node"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// CopyReport is how one member cluster holds a plane node's copy, from
// the node's status.clusters: Matches (made from the node's generation),
// Differs (from an older one), Missing (the node has a share there and
// the member holds no copy), or Unreachable (the plane does not hear from
// the member).
type CopyReport struct {
	Cluster string `json:"cluster"`
	State   string `json:"state"`
	// AppliedGeneration is the node's generation the copy was made from,
	// MaterializedGeneration the one the member's Kueue objects were
	// last written from.
	AppliedGeneration      int64  `json:"appliedGeneration,omitempty"`
	MaterializedGeneration int64  `json:"materializedGeneration,omitempty"`
	Detail                 string `json:"detail,omitempty"`
}

// ObjectReport is one Kueue object and whether it matches what the
// projector computes for the node.
type ObjectReport struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// State is Matches, Differs, Missing, or Held (the node is not Ready,
	// so whatever exists is left as it was).
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// BudgetCheck is a budget against its parent's and the mark.
type BudgetCheck struct {
	Resource      string `json:"resource"`
	Flavor        string `json:"flavor"`
	Nominal       string `json:"nominal"`
	Parent        string `json:"parent,omitempty"`
	ParentNominal string `json:"parentNominal,omitempty"`
	SiblingsTotal string `json:"childrenOfParentTotal,omitempty"`
	HighWaterMark string `json:"highWaterMark"`
}

// ValidationReport is `kubectl ome quota validate -o json|yaml`.
type ValidationReport struct {
	metav1.TypeMeta `json:",inline"`
	Offline         bool `json:"offline"`
	// Violations are the writes the webhook would deny and the rules the
	// resulting tree breaks.
	Violations []Finding `json:"violations,omitempty"`
	// Warnings are budgets above the mark: admitted, but CapacityExceeded.
	Warnings []Finding `json:"warnings,omitempty"`
	// Marks are the high-water marks judged against, and with
	// --without-nodes how they would move.
	Marks []MarkReport `json:"marks,omitempty"`
	// WithoutNodes are the Nodes left out, and WouldFreeze the tree nodes
	// that would then not be Ready.
	WithoutNodes []string  `json:"withoutNodes,omitempty"`
	WouldFreeze  []Finding `json:"wouldFreeze,omitempty"`
}

// Finding is one violation or warning.
type Finding struct {
	// Source is "file:line" of the object written, when one is.
	Source  string `json:"source,omitempty"`
	Node    string `json:"node"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// MarkReport is one pair's high-water mark.
type MarkReport struct {
	Resource      string `json:"resource"`
	Flavor        string `json:"flavor"`
	HighWaterMark string `json:"highWaterMark"`
	// Without is the mark with --without-nodes.
	Without string `json:"without,omitempty"`
}

// PlanReport is `kubectl ome quota plan -o json|yaml`: the rule book's
// findings, as validate reports them, and the change's impact on the work
// Kueue runs.
type PlanReport struct {
	metav1.TypeMeta `json:",inline"`
	Violations      []Finding    `json:"violations,omitempty"`
	Warnings        []Finding    `json:"warnings,omitempty"`
	Marks           []MarkReport `json:"marks,omitempty"`
	WithoutNodes    []string     `json:"withoutNodes,omitempty"`
	WouldFreeze     []Finding    `json:"wouldFreeze,omitempty"`
	// Impact is what the change does to admitted and pending Workloads.
	Impact *impact.Report `json:"impact"`
}

func deepCopyJSON[T any](in *T) *T {
	data, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		panic(err)
	}
	return out
}

// DeepCopyObject implements runtime.Object, for cli-runtime's printers.
func (r *TreeReport) DeepCopyObject() runtime.Object { return deepCopyJSON(r) }

// DeepCopyObject implements runtime.Object.
func (r *StatusReport) DeepCopyObject() runtime.Object { return deepCopyJSON(r) }

// DeepCopyObject implements runtime.Object.
func (r *ValidationReport) DeepCopyObject() runtime.Object { return deepCopyJSON(r) }

// DeepCopyObject implements runtime.Object.
func (r *PlanReport) DeepCopyObject() runtime.Object { return deepCopyJSON(r) }

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: ReportGroupVersion.String(), Kind: kind}
}
