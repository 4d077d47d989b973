package alerts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/test/localcluster"
)

// RulesFile is the one source of the alert rules.
const RulesFile = "../../charts/ome-quota-manager/files/alerts.yaml"

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func alertNames(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(RulesFile)
	require.NoError(t, err)
	var f ruleFile
	require.NoError(t, yaml.UnmarshalStrict(data, &f))
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "every rule is an alert")
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s's severity", r.Alert)
			require.NotEmpty(t, r.For, "%s fires only on a lasting condition", r.Alert)
			require.Equal(t, "docs/runbooks.md#"+strings.ToLower(r.Alert), r.Annotations["runbook"], "%s's runbook annotation", r.Alert)
			out = append(out, r.Alert)
		}
	}
	return out
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := localcluster.EnsureBinaries(context.Background())
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(bin, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func TestCheckRules(t *testing.T) {
	out := promtool(t, ".", "check", "rules", "--lint=all", "--lint-fatal", RulesFile)
	require.Contains(t, out, "SUCCESS: 16 rules found")
}

func TestRulesUnitTests(t *testing.T) {
	out := promtool(t, "testdata", "test", "rules", "alerts_test.yaml", "fleet_test.yaml")
	require.Equal(t, 2, strings.Count(out, "SUCCESS"), "promtool:\n%s", out)
}

// Every alert has a test where it fires and one where it stays silent.
func TestEveryAlertTested(t *testing.T) {
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, file := range []string{"testdata/alerts_test.yaml", fleetFile} {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		var f struct {
			RuleFiles []string `json:"rule_files"`
			Tests     []struct {
				Name   string `json:"name"`
				Alerts []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		require.NoError(t, yaml.Unmarshal(data, &f))
		require.Equal(t, []string{"../" + RulesFile}, f.RuleFiles, "the tests of %s load the chart's rules", file)
		for _, tc := range f.Tests {
			for _, a := range tc.Alerts {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
		}
	}
	for _, a := range alertNames(t) {
		require.True(t, fires[a], "%s has no test where it fires", a)
		require.True(t, silent[a], "%s has no test where it stays silent", a)
	}
}

// Every alert has a runbook section: symptom, cause, check and fix.
func TestEveryAlertHasARunbook(t *testing.T) {
	data, err := os.ReadFile("../../docs/runbooks.md")
	require.NoError(t, err)
	sections := strings.Split(string(data), "\n## ")
	for _, a := range alertNames(t) {
		var body string
		for _, s := range sections[1:] {
			if strings.HasPrefix(s, a+"\n") {
				body = s
			}
		}
		require.NotEmpty(t, body, "docs/runbooks.md has no section \"## %s\"", a)
		for _, part := range []string{"**Symptom**", "**Cause**", "**Check**", "**Fix**", "kubectl "} {
			require.Contains(t, body, part, "the runbook of %s", a)
		}
	}
}
