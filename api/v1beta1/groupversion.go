package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of AcceleratorQuota.
const GroupName = "ome.io"

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

// AcceleratorQuotas is the plural resource of AcceleratorQuota in this
// group version.
var AcceleratorQuotas = SchemeGroupVersion.WithResource("acceleratorquotas")

// AdmissionLedgers is the plural resource of AdmissionLedger.
var AdmissionLedgers = SchemeGroupVersion.WithResource("admissionledgers")

// Resource takes an unqualified resource and returns it qualified with this
// package's group, as the generated listers expect.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the types of this package into a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &AcceleratorQuota{}, &AcceleratorQuotaList{}, &AdmissionLedger{}, &AdmissionLedgerList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
