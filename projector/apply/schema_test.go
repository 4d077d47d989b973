package apply

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/api/v1beta1/aqtest"
)

func readCRD(t *testing.T) []byte {
	data, err := os.ReadFile("../../config/crd/ome.io_acceleratorquotas.yaml")
	require.NoError(t, err)
	return data
}

func TestStatusSchema(t *testing.T) {
	ours := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.Unmarshal(readCRD(t), ours))
	s, err := NewStatusSchema(ours)
	require.NoError(t, err)
	require.Nil(t, s, "the project's CRD declares every status field")

	ome, err := aqtest.OMECRD(readCRD(t))
	require.NoError(t, err)
	s, err = NewStatusSchema(ome)
	require.NoError(t, err)
	require.NotNil(t, s)
	require.Equal(t, []string{"status.summary", "status.unbudgeted"}, s.Missing)

	st, err := toJSONMap(fullStatus())
	require.NoError(t, err)
	s.Prune(st)
	require.NotContains(t, st, "summary")
	require.NotContains(t, st, "unbudgeted")
	for _, k := range []string{"observedGeneration", "conditions", "capacity", "budgets"} {
		require.Contains(t, st, k)
	}
	require.Len(t, st["budgets"].([]any)[0], 6, "a budget keeps its six fields")

	// A schema without status at all leaves out every field; one that
	// preserves unknown fields leaves out none.
	bare := ome.DeepCopy()
	delete(bare.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties, "status")
	s, err = NewStatusSchema(bare)
	require.NoError(t, err)
	require.Len(t, s.Missing, 6)
	open := bare.DeepCopy()
	yes := true
	open.Spec.Versions[0].Schema.OpenAPIV3Schema.XPreserveUnknownFields = &yes
	s, err = NewStatusSchema(open)
	require.NoError(t, err)
	require.Nil(t, s)

	// A nil schema prunes nothing.
	var none *StatusSchema
	st, _ = toJSONMap(fullStatus())
	none.Prune(st)
	require.Contains(t, st, "summary")

	_, err = NewStatusSchema(&apiextensionsv1.CustomResourceDefinition{})
	require.ErrorContains(t, err, "serves no v1beta1 schema")
}
