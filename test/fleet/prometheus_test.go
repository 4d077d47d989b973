package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// planeUsageInPrometheus starts a real Prometheus that scrapes the plane
// (pm) and checks, while a member's Kueue admits team's workloads, that
// what it reads of the team equals what kubectl shows of the fleet node:
// ome_quota_budget_admitted{plane="management"} its ADMITTED column (the
// members' sum, which must not be 0), ome_quota_budget_reserved its
// status.budgets[0].reserved, and ome_quota_budget_share_admitted of each
// member its status.budgets[0].perCluster[].admitted, adding up to the
// total.
func planeUsageInPrometheus(t *testing.T, hub *localcluster.Cluster, pm *localcluster.Manager, team string) {
	ctx := context.Background()
	prom := scrapedPlane(t, pm)
	one := func(expr string) (string, error) {
		v, err := promQuery(prom, expr)
		if err != nil {
			return "", err
		}
		if len(v) != 1 {
			return "", fmt.Errorf("%s returns %d series, want 1", expr, len(v))
		}
		return v[0], nil
	}
	// Figures as the API server keeps them, in canonical form.
	canonical := func(s string) string {
		q, err := resource.ParseQuantity(strings.TrimSpace(s))
		if err != nil {
			return fmt.Sprintf("%q (%v)", s, err)
		}
		return q.String()
	}
	testutil.Eventually(t, 60*time.Second, func() string {
		table, err := hub.Kubectl(ctx, "get", "aq", team)
		if err != nil {
			return err.Error()
		}
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if len(lines) != 2 {
			return "kubectl get aq " + team + " printed:\n" + table
		}
		col := indexOf(strings.Fields(lines[0]), "ADMITTED")
		if col < 0 {
			return "kubectl get aq prints no ADMITTED column:\n" + table
		}
		admittedCol := strings.Fields(lines[1])[col]
		if canonical(admittedCol) == "0" {
			return fmt.Sprintf("kubectl get aq %s shows ADMITTED %s: no member's workloads are admitted yet", team, admittedCol)
		}
		status, err := hub.Kubectl(ctx, "get", "aq", team, "-o",
			`jsonpath={.status.budgets[0].reserved}{range .status.budgets[0].perCluster[*]}{" "}{.cluster}={.admitted}{end}`)
		if err != nil {
			return err.Error()
		}
		fields := strings.Fields(status)
		if len(fields) == 0 {
			return "the plane's " + team + " has no status.budgets"
		}
		sel := fmt.Sprintf(`{plane="management",quota=%q}`, team)
		checks := [][3]string{
			{"ome_quota_budget_admitted" + sel, admittedCol, "ADMITTED in kubectl get aq"},
			{"ome_quota_budget_reserved" + sel, fields[0], "status.budgets[0].reserved"},
			{fmt.Sprintf(`sum(ome_quota_budget_share_admitted{quota=%q})`, team), admittedCol, "ADMITTED, the members' parts summed"},
		}
		for _, part := range fields[1:] {
			cluster, admitted, _ := strings.Cut(part, "=")
			checks = append(checks, [3]string{fmt.Sprintf(`ome_quota_budget_share_admitted{quota=%q,cluster=%q}`, team, cluster), admitted,
				"status.budgets[0].perCluster[" + cluster + "].admitted"})
		}
		for _, c := range checks {
			got, err := one(c[0])
			if err != nil {
				return err.Error()
			}
			if canonical(got) != canonical(c[1]) {
				return fmt.Sprintf("Prometheus reads %s = %s, the plane's %s shows %s as its %s", c[0], got, team, c[1], c[2])
			}
		}
		return ""
	})
}

func indexOf(fields []string, s string) int {
	for i, f := range fields {
		if f == s {
			return i
		}
	}
	return -1
}

// promQuery evaluates expr now through Prometheus' HTTP API and returns
// the values of the series it finds.
func promQuery(prom *localcluster.Prometheus, expr string) ([]string, error) {
	resp, err := http.Get(prom.URL + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %s: %w: %s", expr, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	var out []string
	for _, s := range r.Data.Result {
		v, _ := s.Value[1].(string)
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			v = strconv.FormatFloat(f, 'f', -1, 64)
		}
		out = append(out, v)
	}
	return out, nil
}

// alertExpr is the expression of the chart's alert name
// (charts/ome-quota-manager/files/alerts.yaml), as Prometheus evaluates
// it before its for: clause.
func alertExpr(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../charts/ome-quota-manager/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r.Expr
			}
		}
	}
	t.Fatalf("the chart has no alert %s", name)
	return ""
}

// scrapedPlane starts a real Prometheus that scrapes the plane (pm) every
// second.
func scrapedPlane(t *testing.T, pm *localcluster.Manager) *localcluster.Prometheus {
	t.Helper()
	ctx := context.Background()
	promDir, err := localcluster.EnsureBinaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prom, err := localcluster.StartPrometheus(ctx, promDir, t.TempDir(), time.Second, fmt.Sprintf("127.0.0.1:%d", pm.MetricsPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	return prom
}
