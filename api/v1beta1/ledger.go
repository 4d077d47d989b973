package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultLedgerName is the one AdmissionLedger the quota manager keeps.
const DefaultLedgerName = "ome-quota-manager"

// AdmissionLedger holds the tree writes that the quota manager's webhook
// admitted and that have not yet been seen to land: each replica judges a
// write on its own view of the tree plus every reservation listed here, and
// adds its own with a compare-and-swap on this object. Only the manager's
// ServiceAccount may write it; editing it by hand can lose reservations.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=ome
// +kubebuilder:printcolumn:name="Reservations",type=integer,JSONPath=`.spec.reservationCount`
// +kubebuilder:printcolumn:name="Floor",type=string,JSONPath=`.spec.floor`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AdmissionLedger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AdmissionLedgerSpec `json:"spec,omitempty"`
}

// AdmissionLedgerSpec is the ledger's content.
type AdmissionLedgerSpec struct {
	// Floor is a resourceVersion of AcceleratorQuotas: every reservation
	// removed from the ledger had been seen to land, or to be unable to
	// land, by a replica whose view of the tree reached it. A replica
	// judges only once its own view has reached the floor too.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Floor string `json:"floor,omitempty"`

	// ReservationCount is len(reservations), for kubectl get.
	// +optional
	ReservationCount int32 `json:"reservationCount,omitempty"`

	// Reservations are the admitted writes not yet seen to land.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Reservations []Reservation `json:"reservations,omitempty"`
}

// Reservation is the effect of one admitted write of the tree.
type Reservation struct {
	// Review is the uid of the AdmissionReview that admitted the write.
	// +kubebuilder:validation:MaxLength=64
	Review string `json:"review"`
	// Node is the AcceleratorQuota written.
	// +kubebuilder:validation:MaxLength=63
	Node string `json:"node"`
	// Operation is CREATE, UPDATE or DELETE.
	// +kubebuilder:validation:Enum=CREATE;UPDATE;DELETE
	Operation string `json:"operation"`
	// UID is the object's metadata.uid (a CREATE's new one).
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
	// Base is the resourceVersion of the object the write was judged on
	// (UPDATE and DELETE): the write can only land as the version that
	// follows it.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Base string `json:"base,omitempty"`
	// Since marks a standing reservation (an UPDATE of a team, with no
	// Base): it stands for the write that made it and for the later writes
	// of the same object, by the same replica, whose budgets are no larger
	// than Spec's, until that replica removes it or it expires. Since is
	// the resourceVersion of the object it was first judged on: once a
	// replica's view has reached it and the object is gone, no write it
	// stands for can land.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Since string `json:"since,omitempty"`
	// Spec is the spec written; absent on DELETE. It is kept as the
	// webhook judged it, without the AcceleratorQuota's schema (whose rules
	// would cost too much in a list of 256).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Spec *AcceleratorQuotaSpec `json:"spec,omitempty"`
	// Replica names the replica that admitted it, and AdmittedAt says when
	// on its clock. Both are for people: no replica decides on them.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Replica string `json:"replica,omitempty"`
	// +optional
	AdmittedAt metav1.Time `json:"admittedAt,omitempty"`
}

// AdmissionLedgerList is a list of AdmissionLedger.
//
// +kubebuilder:object:root=true
type AdmissionLedgerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdmissionLedger `json:"items"`
}
