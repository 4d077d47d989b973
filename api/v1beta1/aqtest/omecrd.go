package aqtest

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// OMECRD builds, from the project's AcceleratorQuota CRD (crdYAML, the
// file in config/crd), the CRD as OME's ome-crd chart installs it
// (ome-projects/ome, charts/ome-crd/templates/ome.io_acceleratorquotas.yaml),
// by changing what that one changes:
//   - spec.priorityTier is a string (a DNS-1123 name), not an integer;
//   - status has no summary and no unbudgeted, and has clusters,
//     materialization, parent and sourceGeneration, which ours lacks;
//   - kubectl get prints the first budget's resource, flavor, nominal and
//     admitted amounts, and Degraded, in place of the summary.
//
// Tests install it in place of ours to run the guide on a cluster where
// OME's chart owns the CRD.
func OMECRD(crdYAML []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("reading the AcceleratorQuota CRD: %w", err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		return nil, fmt.Errorf("the AcceleratorQuota CRD has %d versions, want one with a schema", len(crd.Spec.Versions))
	}
	v := &crd.Spec.Versions[0]
	root := v.Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	spec.Properties["priorityTier"] = apiextensionsv1.JSONSchemaProps{
		Type: "string", MaxLength: ptr(int64(63)),
		Pattern: `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`,
	}
	root.Properties["spec"] = spec

	status := root.Properties["status"]
	delete(status.Properties, "summary")
	delete(status.Properties, "unbudgeted")
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	gen := apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
	status.Properties["parent"] = str
	status.Properties["sourceGeneration"] = gen
	status.Properties["materialization"] = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"frozen": {Type: "boolean"}, "reason": str, "lastAppliedGeneration": gen,
	}}
	status.Properties["clusters"] = apiextensionsv1.JSONSchemaProps{
		Type: "array", XListType: ptr("map"), XListMapKeys: []string{"cluster"},
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: []string{"cluster"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"cluster": str, "appliedGeneration": gen, "message": str},
		}},
	}
	root.Properties["status"] = status

	col := func(name, path string) apiextensionsv1.CustomResourceColumnDefinition {
		return apiextensionsv1.CustomResourceColumnDefinition{Name: name, Type: "string", JSONPath: path}
	}
	v.AdditionalPrinterColumns = []apiextensionsv1.CustomResourceColumnDefinition{
		col("Role", ".spec.role"), col("Parent", ".spec.parentRef.name"),
		col("Resource", ".status.budgets[0].resourceName"), col("Flavor", ".status.budgets[0].resourceFlavor"),
		col("Nominal", ".status.budgets[0].nominal"), col("Admitted", ".status.budgets[0].admitted"),
		{Name: "Borrowed", Type: "string", JSONPath: ".status.budgets[0].borrowed", Priority: 1},
		col("Ready", `.status.conditions[?(@.type=="Ready")].status`),
		col("Degraded", `.status.conditions[?(@.type=="Degraded")].status`),
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
	return crd, nil
}

func ptr[T any](v T) *T { return &v }
