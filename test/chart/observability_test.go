package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func chartFile(t *testing.T, name string) []byte {
	t.Helper()
	dir, err := Dir()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, "files", name))
	require.NoError(t, err)
	return data
}

// Off by default; on, the PrometheusRule carries exactly the rules of
// files/alerts.yaml, which test/alerts checks with promtool.
func TestPrometheusRule(t *testing.T) {
	r := render(t, install)
	require.Nil(t, r.Get("PrometheusRule", "ome-quota-manager"), "off by default")

	r = render(t, install, "prometheusRule.enabled=true", "prometheusRule.additionalLabels.release=kube-prometheus")
	pr := r.Get("PrometheusRule", "ome-quota-manager")
	require.NotNil(t, pr, "objects: %v", r.Kinds())
	require.Equal(t, "monitoring.coreos.com/v1", pr.GetAPIVersion())
	require.Equal(t, "ome", pr.GetNamespace())
	require.Equal(t, "kube-prometheus", pr.GetLabels()["release"])
	var want map[string]any
	require.NoError(t, yaml.Unmarshal(chartFile(t, "alerts.yaml"), &want))
	spec, _, err := unstructured.NestedMap(pr.Object, "spec")
	require.NoError(t, err)
	require.Equal(t, want, spec)
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	require.NotEmpty(t, groups)
	rules, _, _ := unstructured.NestedSlice(groups[0].(map[string]any), "rules")
	require.Len(t, rules, 16)
}

// Off by default; on, a ConfigMap labelled for Grafana's dashboard sidecar
// carries files/dashboard.json unchanged.
func TestDashboardConfigMap(t *testing.T) {
	r := render(t, install)
	require.Nil(t, r.Get("ConfigMap", "ome-quota-manager-dashboard"), "off by default")

	r = render(t, install, "dashboards.enabled=true", "dashboards.annotations.grafana_folder=Quotas")
	cm := r.Get("ConfigMap", "ome-quota-manager-dashboard")
	require.NotNil(t, cm, "objects: %v", r.Kinds())
	require.Equal(t, "1", cm.GetLabels()["grafana_dashboard"])
	require.Equal(t, "Quotas", cm.GetAnnotations()["grafana_folder"])
	data, _, err := unstructured.NestedString(cm.Object, "data", "ome-quota-manager.json")
	require.NoError(t, err)
	require.JSONEq(t, string(chartFile(t, "dashboard.json")), data)
	var d struct {
		UID    string `json:"uid"`
		Panels []any  `json:"panels"`
	}
	require.NoError(t, json.Unmarshal([]byte(data), &d))
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Panels)
}
