package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names fixed by the product.
const (
	// RootName is the name of the tree's root node, which the manager creates.
	RootName = "root"
	// ManagedByLabel marks every object the manager writes; it only ever
	// updates or deletes objects that carry it.
	ManagedByLabel = "ome.io/quota-managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "ome-quota-manager"
	// RootFinalizer keeps root (and so the marks in its status) until the
	// manager, or an admin, lets it go.
	RootFinalizer = "ome.io/accelerator-quota"

	// OriginLabel marks a copy that a management plane projected onto a
	// member cluster; its value is the plane's origin (--origin). A node
	// without it was written on the cluster itself.
	OriginLabel = "ome.io/quota-origin"
	// OriginUIDAnnotation holds the uid of the plane's node a copy was
	// made from, so that a copy of an earlier life of the name is told
	// from a copy of the current one.
	OriginUIDAnnotation = "ome.io/quota-origin-uid"
	// SourceGenerationAnnotation holds the generation of the plane's node
	// a copy was made from.
	SourceGenerationAnnotation = "ome.io/quota-source-generation"
	// ClusterAnnotation names the member cluster a copy was made for.
	ClusterAnnotation = "ome.io/quota-cluster"
	// ReleaseAnnotation marks a copy that the member cluster's admin
	// releases (kubectl ome quota release); its value is the copy's
	// origin. The member's webhook lets a copy so marked be deleted by
	// whoever may release it.
	ReleaseAnnotation = "ome.io/quota-release"
	// FenceAnnotation holds, on a copy, a version of it the plane made the
	// copy move away from: its writer let more through than the copy held
	// then, and a new version proves that none of it can land any more.
	FenceAnnotation = "ome.io/quota-fence"
	// CopiesFinalizer keeps a management plane's team until no member
	// cluster holds a copy of it, so that the hold record in its status
	// (status.holds) outlives every copy it bounds.
	CopiesFinalizer = "ome.io/fleet-copies"
	// WebhookCallersAnnotation and WebhookPolicyAnnotation are what the
	// manager's webhook says, on its ValidatingWebhookConfiguration, of
	// who may call it (whether its callers are authenticated) and of its
	// NetworkPolicy (whether it still admits every API server address);
	// kubectl ome quota status root prints them.
	WebhookCallersAnnotation = "ome.io/webhook-callers"
	WebhookPolicyAnnotation  = "ome.io/webhook-network-policy"
)

// Role is what a node of the tree is written to Kueue as.
// +kubebuilder:validation:Enum=Cohort;ClusterQueue
type Role string

const (
	// RoleCohort groups other nodes; it becomes a Kueue Cohort.
	RoleCohort Role = "Cohort"
	// RoleClusterQueue is a team, with no children; it becomes a Kueue
	// ClusterQueue and a LocalQueue in each enrolled namespace.
	RoleClusterQueue Role = "ClusterQueue"
)

// Condition types on a node's status.
const (
	ConditionReady        = "Ready"
	ConditionDegraded     = "Degraded"
	ConditionMaterialized = "Materialized"
)

// AcceleratorQuota is one node of the quota tree.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=aq,categories=ome
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentRef.name`
// +kubebuilder:printcolumn:name="Nominal",type=string,JSONPath=`.status.summary.nominal`
// +kubebuilder:printcolumn:name="Admitted",type=string,JSONPath=`.status.summary.admitted`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a lowercase RFC 1123 label of at most 63 characters (letters, digits and '-'), because it names Kueue queues and is used as a label value"
type AcceleratorQuota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AcceleratorQuotaSpec   `json:"spec"`
	Status AcceleratorQuotaStatus `json:"status,omitempty"`
}

// AcceleratorQuotaSpec is what an admin writes for a node. The split
// fields of management mode are checked here, by the API server, as OME's
// CRD checks them: they are team-only, an Explicit budget lists its shares
// and a Proportional one lists none.
// +kubebuilder:validation:XValidation:rule="self.role != 'Cohort' || !has(self.distribution)",message="distribution is a team-only field and this node is a Cohort: remove it, or make the node a ClusterQueue"
// +kubebuilder:validation:XValidation:rule="self.role != 'Cohort' || !has(self.budgets) || self.budgets.all(b, !has(b.policy) && !has(b.perCluster))",message="policy and perCluster are team-only fields of a budget and this node is a Cohort: remove them, or make the node a ClusterQueue"
// +kubebuilder:validation:XValidation:rule="!has(self.budgets) || self.budgets.all(b, !(has(b.policy) ? b.policy == 'Explicit' : (has(self.distribution) && has(self.distribution.policy) && self.distribution.policy == 'Explicit')) || has(b.perCluster))",message="a budget split Explicit must list each cluster's share in perCluster: add them, or split it Proportional"
// +kubebuilder:validation:XValidation:rule="!has(self.budgets) || self.budgets.all(b, !(has(b.policy) ? b.policy == 'Proportional' : (has(self.distribution) && has(self.distribution.policy) && self.distribution.policy == 'Proportional')) || !has(b.perCluster))",message="a budget split Proportional takes no perCluster, as its shares are computed from each cluster's capacity: remove perCluster, or split it Explicit"
type AcceleratorQuotaSpec struct {
	// Role is Cohort (groups nodes) or ClusterQueue (a team, no children).
	// +required
	Role Role `json:"role"`

	// ParentRef names the parent node. Every node but root has one.
	// +optional
	ParentRef *ParentReference `json:"parentRef,omitempty"`

	// Budgets are the node's amounts, one per (resourceName, resourceFlavor).
	// A Cohort's budget is an authoring cap on its children's nominal; a
	// team's budget becomes its ClusterQueue quota.
	// +optional
	// +listType=map
	// +listMapKey=resourceName
	// +listMapKey=resourceFlavor
	// +kubebuilder:validation:MaxItems=16
	Budgets []Budget `json:"budgets,omitempty"`

	// PriorityTier is a team field kept for management mode; it has no
	// effect in workload mode.
	// +optional
	PriorityTier *int32 `json:"priorityTier,omitempty"`

	// Distribution is how the fleet budgets of a team are split among the
	// workload clusters in management mode (a budget's own policy takes
	// precedence). It has no effect in workload mode.
	// +optional
	Distribution *Distribution `json:"distribution,omitempty"`

	// GoneClusters, on a management plane's root, are the member clusters
	// an admin declared gone for good: the plane stops reaching for them
	// and what they last held no longer counts against the fleet's
	// budgets. Root's alone; no effect in workload mode.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	GoneClusters []GoneCluster `json:"goneClusters,omitempty"`
}

// GoneCluster is a member cluster declared gone for good.
type GoneCluster struct {
	// Name is the cluster's name in the plane's fleet.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Force declares the cluster gone even while the plane still reaches
	// it: what it holds then no longer counts, though it may still admit
	// work against it.
	// +optional
	Force bool `json:"force,omitempty"`
}

// DistributionPolicy is how a fleet budget is split among the workload
// clusters: Explicit (each cluster's share listed in perCluster) or
// Proportional (by each cluster's measured capacity of the pair).
// +kubebuilder:validation:Enum=Explicit;Proportional
type DistributionPolicy string

// The distribution policies.
const (
	DistributionExplicit     DistributionPolicy = "Explicit"
	DistributionProportional DistributionPolicy = "Proportional"
)

// Distribution is a team's default split policy for its fleet budgets.
type Distribution struct {
	// Policy applies to each budget that names none of its own.
	// +optional
	Policy DistributionPolicy `json:"policy,omitempty"`
}

// ParentReference names another AcceleratorQuota.
type ParentReference struct {
	// Name of the parent node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// Budget is an amount of one resource on one Kueue ResourceFlavor.
//
// +kubebuilder:validation:XValidation:rule="!string(self.nominal).startsWith('-')",message="nominal must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.borrowingLimit) || !string(self.borrowingLimit).startsWith('-')",message="borrowingLimit must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.lendingLimit) || !string(self.lendingLimit).startsWith('-')",message="lendingLimit must not be negative"
type Budget struct {
	// ResourceName is the resource counted, e.g. nvidia.com/gpu.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	ResourceName string `json:"resourceName"`

	// ResourceFlavor names the Kueue ResourceFlavor the amount is on.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ResourceFlavor string `json:"resourceFlavor"`

	// Nominal is the node's own share.
	// +required
	Nominal resource.Quantity `json:"nominal"`

	// BorrowingLimit is how much a team may take above nominal from idle
	// quota in its cohort. Unset means 0: borrowing is opted into.
	// +optional
	BorrowingLimit *resource.Quantity `json:"borrowingLimit,omitempty"`

	// LendingLimit is how much of nominal others may borrow while the team
	// is idle. Unset means all of it.
	// +optional
	LendingLimit *resource.Quantity `json:"lendingLimit,omitempty"`

	// Policy is how this fleet budget is split among the workload clusters
	// in management mode; unset, the spec's distribution policy applies.
	// No effect in workload mode.
	// +optional
	Policy DistributionPolicy `json:"policy,omitempty"`

	// PerCluster lists each workload cluster's share of this fleet budget
	// under the Explicit policy, in management mode. No effect in
	// workload mode.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=256
	PerCluster []ClusterShare `json:"perCluster,omitempty"`
}

// ClusterShare is one workload cluster's share of a fleet budget.
type ClusterShare struct {
	// Cluster names the workload cluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// Nominal is that cluster's share.
	// +required
	Nominal resource.Quantity `json:"nominal"`
}

// AcceleratorQuotaStatus is what the manager reports on a node.
type AcceleratorQuotaStatus struct {
	// ObservedGeneration is the spec generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Degraded and, while namespaces are enrolled,
	// Materialized.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Capacity is root's measurement per (resource, flavor), with the
	// high-water mark that budgets are checked against. Only root has it.
	// +optional
	// +listType=map
	// +listMapKey=resourceName
	// +listMapKey=resourceFlavor
	Capacity []CapacityStatus `json:"capacity,omitempty"`

	// Budgets reports a team's usage per budget, read from its ClusterQueue.
	// +optional
	// +listType=map
	// +listMapKey=resourceName
	// +listMapKey=resourceFlavor
	Budgets []BudgetStatus `json:"budgets,omitempty"`

	// Unbudgeted lists DRA devices published under DeviceClasses that no
	// mapping counts, which Kueue would not charge to any budget.
	// +optional
	// +listType=map
	// +listMapKey=deviceClassName
	Unbudgeted []UnbudgetedDevices `json:"unbudgeted,omitempty"`

	// Summary holds the compact text that `kubectl get aq` prints.
	// +optional
	Summary *StatusSummary `json:"summary,omitempty"`

	// Clusters is, on a management plane, how each member cluster's copy
	// of the node stands. Empty in workload mode.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=256
	Clusters []ClusterStatus `json:"clusters,omitempty"`

	// SourceGeneration is, on a copy projected by a management plane, the
	// generation of the plane's node that the copy's Kueue objects were
	// last written from.
	// +optional
	SourceGeneration int64 `json:"sourceGeneration,omitempty"`
	// Holds is, on a management plane's team, the record of the most
	// each member cluster may hold of the team's budgets, written by the
	// plane's leader before it lets a member's copy go up: a new leader,
	// or a restarted plane, reads it back as the bound on what the members
	// hold until it hears from them.
	// +optional
	Holds *FleetHolds `json:"holds,omitempty"`
	// Members is, on a management plane's root, each cluster of its
	// fleet at a glance: the members, the clusters that left while still
	// holding copies, and those declared gone in spec.goneClusters. Empty
	// in workload mode.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=512
	Members []MemberStatus `json:"members,omitempty"`
}

// MemberState is where a cluster stands in a management plane's fleet.
// +kubebuilder:validation:Enum=Member;Leaving;Gone
type MemberState string

// The states of a fleet's cluster.
const (
	// MemberStateMember: the plane's inventory lists it, and it counts in
	// the splits.
	MemberStateMember MemberState = "Member"
	// MemberStateLeaving: it left the fleet while it still held copies,
	// which the plane deletes while it reaches it.
	MemberStateLeaving MemberState = "Leaving"
	// MemberStateGone: root's spec.goneClusters declares it gone and the
	// plane forgot it: what it last held no longer counts.
	MemberStateGone MemberState = "Gone"
)

// MemberStatus is how one cluster of a management plane's fleet stands.
type MemberStatus struct {
	// +kubebuilder:validation:MaxLength=253
	Cluster string      `json:"cluster"`
	State   MemberState `json:"state"`
	// Reachable is whether the plane hears from it.
	Reachable bool `json:"reachable"`
	// Since is when Reachable took its value: when it last started or
	// stopped answering, or when the plane started listing it.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// LastReport is when the plane last took a report from it (a member
	// reports when its capacity, flavors, copies or their usage change),
	// since the plane's process started.
	// +optional
	LastReport *metav1.Time `json:"lastReport,omitempty"`
	// Reported is whether it ever reported its capacity.
	Reported bool `json:"reported"`
	// SplitOut is set while it is left out of the Proportional splits:
	// it has not reported within the plane's member grace.
	// +optional
	SplitOut bool `json:"splitOut,omitempty"`
	// Copies counts the plane's copies it holds, as it last reported;
	// CopiesBehind those it should hold and lacks, or holds made from an
	// older generation of their node.
	// +optional
	Copies int32 `json:"copies,omitempty"`
	// +optional
	CopiesBehind int32 `json:"copiesBehind,omitempty"`
	// RaisesWaiting counts the raises of its copies that wait;
	// ReleasesAwaited the raises of other members' copies that wait for it
	// to release what it may hold above its share.
	// +optional
	RaisesWaiting int32 `json:"raisesWaiting,omitempty"`
	// +optional
	ReleasesAwaited int32 `json:"releasesAwaited,omitempty"`
	// Reason is one word for its state: Answering, RaisesWaiting,
	// HoldsOthersBack, ClusterUnreachable (or the inventory's refusal,
	// such as KubeconfigRefused), NotReported, SplitOut, StillAnswering
	// (declared gone, but it answers), ClusterLeaving or ClusterGone.
	Reason string `json:"reason"`
	// Message says what the reason means for this cluster, and what to do.
	// +optional
	Message string `json:"message,omitempty"`
}

// FleetHolds is a plane leader's record of what member clusters may hold
// of one team's budgets.
type FleetHolds struct {
	// Writer names the leadership that wrote the record: its term (the
	// plane's Lease resourceVersion when it took the lead, 0 without
	// leader election) and a nonce of its process, as TERM/NONCE.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Writer string `json:"writer"`
	// Clusters lists, per member cluster, the most it may hold.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=256
	Clusters []ClusterHolds `json:"clusters,omitempty"`
}

// ClusterHolds is the most one member cluster may hold of a team's
// budgets.
type ClusterHolds struct {
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// +optional
	// +listType=map
	// +listMapKey=resourceName
	// +listMapKey=resourceFlavor
	// +kubebuilder:validation:MaxItems=16
	Budgets []HeldBudget `json:"budgets,omitempty"`
}

// HeldBudget is the most a member cluster may hold of one budget: its
// nominal and its borrowingLimit.
type HeldBudget struct {
	ResourceName   string            `json:"resourceName"`
	ResourceFlavor string            `json:"resourceFlavor"`
	Nominal        resource.Quantity `json:"nominal"`
	// +optional
	BorrowingLimit resource.Quantity `json:"borrowingLimit,omitempty"`
}

// ClusterStatus is how one member cluster's copy of a fleet node stands.
type ClusterStatus struct {
	Cluster string `json:"cluster"`
	// AppliedGeneration is the node's generation the copy last written to
	// the member was made from.
	// +optional
	AppliedGeneration int64 `json:"appliedGeneration,omitempty"`
	// MaterializedGeneration is the generation the member's manager last
	// wrote Kueue objects from (the copy's status.sourceGeneration).
	// +optional
	MaterializedGeneration int64 `json:"materializedGeneration,omitempty"`
	// Message says why the member is behind, or unreachable.
	// +optional
	Message string `json:"message,omitempty"`
	// Waiting says what a raise of the member's copy waits for: another
	// member's lowering not yet read back, a member that does not answer,
	// or the hold record not yet written; empty when nothing waits.
	// +optional
	Waiting string `json:"waiting,omitempty"`
	// WaitingSince is when that raise began to wait.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`
}

// CapacityStatus is the measured capacity of one (resource, flavor) pair.
type CapacityStatus struct {
	ResourceName   string `json:"resourceName"`
	ResourceFlavor string `json:"resourceFlavor"`
	// Allocatable sums the pair over Ready, uncordoned nodes.
	Allocatable resource.Quantity `json:"allocatable"`
	// HighWaterMark is the damped peak of installed capacity (every node,
	// cordoned and NotReady included).
	HighWaterMark resource.Quantity `json:"highWaterMark"`
	// ObservedAt is when the figures were last measured and written.
	// +optional
	ObservedAt metav1.Time `json:"observedAt,omitempty"`
	// PerCluster is, on a management plane, each member cluster's part of
	// the figures above, as its own root reports them.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=256
	PerCluster []ClusterCapacity `json:"perCluster,omitempty"`
}

// ClusterCapacity is one member cluster's capacity of a pair.
type ClusterCapacity struct {
	Cluster       string            `json:"cluster"`
	Allocatable   resource.Quantity `json:"allocatable"`
	HighWaterMark resource.Quantity `json:"highWaterMark"`
}

// BudgetStatus is a team's usage of one budget, from its ClusterQueue.
type BudgetStatus struct {
	ResourceName   string            `json:"resourceName"`
	ResourceFlavor string            `json:"resourceFlavor"`
	Nominal        resource.Quantity `json:"nominal"`
	// Admitted is what admitted workloads use.
	// +optional
	Admitted resource.Quantity `json:"admitted,omitempty"`
	// Reserved is what workloads hold a quota reservation for.
	// +optional
	Reserved resource.Quantity `json:"reserved,omitempty"`
	// Borrowed is the part of Admitted taken above nominal from the cohort.
	// +optional
	Borrowed resource.Quantity `json:"borrowed,omitempty"`
	// PerCluster is, on a management plane, each member cluster's share of
	// the budget and what its Kueue admitted, reserved and borrowed there.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=256
	PerCluster []ClusterBudgetStatus `json:"perCluster,omitempty"`
}

// ClusterBudgetStatus is one member cluster's share of a budget and its
// use there.
type ClusterBudgetStatus struct {
	Cluster string            `json:"cluster"`
	Nominal resource.Quantity `json:"nominal"`
	// Held is the most the member may hold of the budget's nominal now:
	// what its copy was last read back with, or what the plane may have
	// written there since, whichever is larger. It differs from Nominal
	// while a move between members is under way.
	// +optional
	Held *resource.Quantity `json:"held,omitempty"`
	// +optional
	Admitted resource.Quantity `json:"admitted,omitempty"`
	// +optional
	Reserved resource.Quantity `json:"reserved,omitempty"`
	// +optional
	Borrowed resource.Quantity `json:"borrowed,omitempty"`
}

// UnbudgetedDevices counts devices no mapping charges to a budget.
type UnbudgetedDevices struct {
	DeviceClassName string `json:"deviceClassName"`
	Devices         int64  `json:"devices"`
}

// StatusSummary is the text of the NOMINAL and ADMITTED printer columns:
// the amount alone for a node with one budget, else
// "resource@flavor=amount" pairs separated by commas.
type StatusSummary struct {
	// +optional
	Nominal string `json:"nominal,omitempty"`
	// +optional
	Admitted string `json:"admitted,omitempty"`
}

// AcceleratorQuotaList is a list of AcceleratorQuota.
//
// +kubebuilder:object:root=true
type AcceleratorQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AcceleratorQuota `json:"items"`
}
