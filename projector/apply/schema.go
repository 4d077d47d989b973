package apply

import (
	"fmt"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// StatusSchema is the status schema of an installed AcceleratorQuota CRD
// that lacks some of the fields the quota manager writes (OME's own CRD,
// from its ome-crd chart, has no status.summary nor status.unbudgeted).
// The API server refuses a server-side apply that sets a field its schema
// does not declare, so the applier leaves those fields out of every status
// write and compares the rest.
type StatusSchema struct {
	status *apiextensionsv1.JSONSchemaProps
	// Missing names the fields left out, as paths ("status.summary").
	Missing []string
}

// NewStatusSchema reads the served v1beta1 schema of crd. It returns nil
// when that schema declares every field the quota manager writes, and an
// error when crd does not serve v1beta1 with a schema.
func NewStatusSchema(crd *apiextensionsv1.CustomResourceDefinition) (*StatusSchema, error) {
	var root *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == v1beta1.SchemeGroupVersion.Version && v.Served && v.Schema != nil {
			root = v.Schema.OpenAPIV3Schema
		}
	}
	if root == nil {
		return nil, fmt.Errorf("CustomResourceDefinition %s serves no %s schema", crd.Name, v1beta1.SchemeGroupVersion.Version)
	}
	st, ok := root.Properties["status"]
	if !ok {
		st = apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: root.XPreserveUnknownFields}
	}
	s := &StatusSchema{status: &st}
	full, err := toJSONMap(fullStatus())
	if err != nil {
		return nil, err
	}
	s.Missing = s.prune(full)
	if len(s.Missing) == 0 {
		return nil, nil
	}
	return s, nil
}

// Prune removes from status (a status as JSON) the fields the schema does
// not declare. A nil schema removes nothing.
func (s *StatusSchema) Prune(status map[string]any) {
	if s != nil {
		s.prune(status)
	}
}

func (s *StatusSchema) prune(status map[string]any) []string {
	seen := map[string]bool{}
	pruneValue(status, s.status, "status", seen)
	missing := make([]string, 0, len(seen))
	for p := range seen {
		missing = append(missing, p)
	}
	sort.Strings(missing)
	return missing
}

func preserves(s *apiextensionsv1.JSONSchemaProps) bool {
	return s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields
}

// pruneValue walks v along schema s as the API server's pruning does:
// an object keeps the properties s declares (all of them when s preserves
// unknown fields, or gives additionalProperties), an array's items follow
// s.items. It records each removed field's path in dropped.
func pruneValue(v any, s *apiextensionsv1.JSONSchemaProps, path string, dropped map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if s.AdditionalProperties != nil {
			if as := s.AdditionalProperties.Schema; as != nil {
				for k, e := range x {
					pruneValue(e, as, path+"."+k, dropped)
				}
			}
			return
		}
		for k, e := range x {
			p, ok := s.Properties[k]
			switch {
			case ok:
				pruneValue(e, &p, path+"."+k, dropped)
			case !preserves(s):
				delete(x, k)
				dropped[path+"."+k] = true
			}
		}
	case []any:
		if s.Items != nil && s.Items.Schema != nil {
			for _, e := range x {
				pruneValue(e, s.Items.Schema, strings.TrimSuffix(path, "[]")+"[]", dropped)
			}
		}
	}
}

// fullStatus is a status with every field the quota manager writes set.
func fullStatus() *v1beta1.AcceleratorQuotaStatus {
	one := resource.MustParse("1")
	at := metav1.NewTime(time.Unix(1, 0).UTC())
	return &v1beta1.AcceleratorQuotaStatus{
		ObservedGeneration: 1,
		Conditions:         []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: at, Reason: "Admitted", Message: "m"}},
		Capacity:           []v1beta1.CapacityStatus{{ResourceName: "r", ResourceFlavor: "f", Allocatable: one, HighWaterMark: one, ObservedAt: at}},
		Budgets:            []v1beta1.BudgetStatus{{ResourceName: "r", ResourceFlavor: "f", Nominal: one, Admitted: one, Reserved: one, Borrowed: one}},
		Unbudgeted:         []v1beta1.UnbudgetedDevices{{DeviceClassName: "d", Devices: 1}},
		Summary:            &v1beta1.StatusSummary{Nominal: "1", Admitted: "1"},
	}
}
