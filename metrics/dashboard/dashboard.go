package dashboard

import (
	"encoding/json"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's stable identifier.
const UID = "ome-quota-manager"

// RateInterval is Grafana's variable for a rate window that fits the scrape
// interval; a query evaluated outside Grafana replaces it.
const RateInterval = "$__rate_interval"

// Every replica reports the same state, so the state's gauges are read
// with max by (...): one series per subject whatever the replica count.
var ds = dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

type query struct{ expr, legend string }

func q(expr, legend string) query { return query{expr, legend} }

// panels numbers panels and rows in order, from 1.
type panels struct{ ids uint32 }

func (c *panels) nextID() uint32 { c.ids++; return c.ids }

func refID(i int) string { return string(rune('A' + i)) }

func (c *panels) series(title, unit, desc string, qs ...query) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Id(c.nextID()).Title(title).Description(desc).Unit(unit).Datasource(ds).Height(8).Span(12)
	for i, x := range qs {
		p.WithTarget(prometheus.NewDataqueryBuilder().RefId(refID(i)).Expr(x.expr).LegendFormat(x.legend))
	}
	return p
}

func (c *panels) single(title, unit, desc string, x query) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Id(c.nextID()).Title(title).Description(desc).Unit(unit).Datasource(ds).Height(4).Span(6).
		WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Expr(x.expr).LegendFormat(x.legend).Instant())
}

func (c *panels) list(title, desc string, x query) *table.PanelBuilder {
	return table.NewPanelBuilder().Id(c.nextID()).Title(title).Description(desc).Datasource(ds).Height(8).Span(12).
		WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Expr(x.expr).Format(prometheus.PromQueryFormatTable).Instant())
}

func rate(metric, by string) string {
	return "sum by (" + by + ") (rate(" + metric + "[" + RateInterval + "]))"
}

func p99(histogram, by string) string {
	return "histogram_quantile(0.99, sum by (" + by + ", le) (rate(" + histogram + "_bucket[" + RateInterval + "])))"
}

func (c *panels) row(title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title).Id(c.nextID())
}

// Build returns the dashboard.
func Build() (dashboard.Dashboard, error) {
	c := &panels{}
	b := dashboard.NewDashboardBuilder("Accelerator quotas").
		Uid(UID).
		Tags([]string{"ome", "quota", "kueue"}).
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithRow(c.row("Health")).
		WithPanel(c.single("Replicas scraped", "none", "Replicas of the quota manager that Prometheus scrapes (ome_quota_build_info).",
			q(`count(ome_quota_build_info)`, ""))).
		WithPanel(c.single("Leaders", "none", "Replicas that hold the leader lease: 1 when healthy.",
			q(`sum(ome_quota_leader)`, ""))).
		WithPanel(c.single("Tree nodes not Ready", "none", "AcceleratorQuotas that break a rule or sit below one that does.",
			q(`sum(max by (state) (ome_quota_nodes{state!="Ready"})) or vector(0)`, ""))).
		WithPanel(c.single("Oldest capacity measurement", "s", "Age of the oldest observedAt stamp on root.",
			q(`time() - min(ome_quota_capacity_observed_timestamp_seconds)`, ""))).
		WithRow(c.row("Budgets")).
		WithPanel(c.series("Team budgets and admitted", "none", "Each team's nominal budget beside what its admitted workloads use, per resource and flavor.",
			q(`max by (quota, resource, flavor) (ome_quota_budget_nominal{role="ClusterQueue"})`, "{{quota}} nominal {{resource}}@{{flavor}}"),
			q(`max by (quota, resource, flavor) (ome_quota_budget_admitted)`, "{{quota}} admitted {{resource}}@{{flavor}}"))).
		WithPanel(c.series("Borrowed and reserved", "none", "What teams use above their nominal, borrowed from their cohort, and what their workloads reserve.",
			q(`max by (quota, resource, flavor) (ome_quota_budget_borrowed)`, "{{quota}} borrowed {{resource}}@{{flavor}}"),
			q(`max by (quota, resource, flavor) (ome_quota_budget_reserved)`, "{{quota}} reserved {{resource}}@{{flavor}}"))).
		WithPanel(c.series("Cohort budgets and the teams below them", "none", "A cohort's nominal beside the admitted usage of the teams it contains.",
			q(`max by (quota, resource, flavor) (ome_quota_budget_nominal{role="Cohort"})`, "{{quota}} {{resource}}@{{flavor}}"),
			q(`sum by (resource, flavor) (max by (quota, resource, flavor) (ome_quota_budget_admitted))`, "all teams admitted {{resource}}@{{flavor}}"))).
		WithPanel(c.list("Tree nodes and their state", "Every AcceleratorQuota with its readiness: reason is Admitted, or the rule it breaks.",
			q(`min by (quota, role, reason) (ome_quota_node_ready)`, ""))).
		WithRow(c.row("Capacity")).
		WithPanel(c.series("Capacity and high-water mark", "none", "Allocatable (Ready, uncordoned nodes) and installed accelerators, and the damped mark budgets are checked against.",
			q(`max by (resource, flavor) (ome_quota_capacity_allocatable)`, "allocatable {{resource}}@{{flavor}}"),
			q(`max by (resource, flavor) (ome_quota_capacity_installed)`, "installed {{resource}}@{{flavor}}"),
			q(`max by (resource, flavor) (ome_quota_capacity_high_water_mark)`, "mark {{resource}}@{{flavor}}"))).
		WithPanel(c.series("Age of the last measurement", "s", "Time since each pair's observedAt stamp; it should stay below the report interval.",
			q(`time() - max by (resource, flavor) (ome_quota_capacity_observed_timestamp_seconds)`, "{{resource}}@{{flavor}}"),
			q(`max(ome_quota_capacity_report_interval_seconds)`, "report interval"))).
		WithPanel(c.series("Kubernetes Nodes", "none", "Nodes by how capacity counts them, and nodes whose accelerators no flavor counts.",
			q(`max by (state) (ome_quota_capacity_nodes)`, "{{state}}"),
			q(`max by (reason) (ome_quota_capacity_unattributed_nodes)`, "unattributed ({{reason}})"))).
		WithPanel(c.series("Tree nodes per state", "none", "AcceleratorQuotas per state: Ready, Frozen, CapacityExceeded, ...",
			q(`max by (state) (ome_quota_nodes)`, "{{state}}"))).
		WithRow(c.row("Writing to Kueue")).
		WithPanel(c.series("Objects confirmed and written", "ops", "applied_total rises on every pass of the leader; writes are real API requests, flat on a quiet cluster.",
			q(rate("ome_quota_backend_applied_total", "kind"), "confirmed {{kind}}"),
			q(rate("ome_quota_backend_writes_total", "kind, verb"), "written {{kind}} {{verb}}"),
			q(rate("ome_quota_backend_swept_total", "kind"), "swept {{kind}}"))).
		WithPanel(c.series("Write errors and apply duration", "short", "Failed writes per second, and the 99th percentile of one node's materialization in seconds.",
			q(rate("ome_quota_backend_write_errors_total", "kind, verb"), "errors {{kind}} {{verb}}"),
			q(p99("ome_quota_backend_apply_seconds", "instance"), "pass p99 {{instance}}"))).
		WithPanel(c.series("Transition Events", "ops", "Kubernetes Events the leader emitted on AcceleratorQuotas, by reason.",
			q(rate("ome_quota_kube_events_total", "reason"), "{{reason}}"))).
		WithRow(c.row("Events and webhook")).
		WithPanel(c.series("Event lag and stream depth", "s", "99th percentile of the time from an event's receipt to its application, and events waiting.",
			q(p99("ome_quota_event_lag_seconds", "instance"), "lag p99 {{instance}}"),
			q(`max by (instance) (ome_quota_event_stream_depth)`, "waiting {{instance}}"))).
		WithPanel(c.series("Events applied", "ops", "Events the state applied per second, by kind.",
			q(rate("ome_quota_events_total", "kind"), "{{kind}}"))).
		WithPanel(c.series("Webhook verdicts", "ops", "Admission answers per second, by verdict.",
			q(rate("ome_quota_webhook_verdicts_total", "verdict"), "{{verdict}}"))).
		WithPanel(c.series("Webhook latency", "s", "99th percentile of a review's time to answer, and of a tree write's judgement (its wait for related reservations included).",
			q(p99("ome_quota_webhook_review_seconds", "instance"), "review p99 {{instance}}"),
			q(p99("ome_quota_webhook_judge_seconds", "instance"), "judge p99 {{instance}}"))).
		WithRow(c.row("Fleet (management plane)")).
		WithPanel(c.series("Member clusters", "none", "On a management plane, 1 while the plane hears from the member cluster, 0 while it does not (its shares and copies are kept); and the copies it lacks or holds behind.",
			q(`max by (cluster) (ome_quota_member_reachable)`, "{{cluster}} answering"),
			q(`min by (cluster) (ome_quota_member_copies_behind)`, "{{cluster}} copies behind"))).
		WithPanel(c.series("Shares per member", "none", "On a management plane, each member cluster's share of each team's fleet budget.",
			q(`max by (quota, resource, flavor, cluster) (ome_quota_budget_share)`, "{{quota}} {{resource}}@{{flavor}} on {{cluster}}"))).
		WithRow(c.row("Replicas")).
		WithPanel(c.series("Leader", "none", "1 on the replica that holds the lease; the count of times each became leader.",
			q(`max by (instance) (ome_quota_leader)`, "leader {{instance}}"),
			q(`max by (instance) (ome_quota_leader_transitions_total)`, "became leader {{instance}}"))).
		WithPanel(c.list("Builds", "The version each replica runs.",
			q(`max by (instance, version, revision, goversion) (ome_quota_build_info)`, "")))
	return b.Build()
}

// PlaneMetrics are the metrics only a management plane publishes: the
// panels that read them are empty on a workload cluster.
var PlaneMetrics = []string{"ome_quota_member_reachable", "ome_quota_budget_share", "ome_quota_member_copies_behind"}

// JSON is the dashboard as the chart ships it: indented, with a final newline.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Queries lists the query of every panel target in a dashboard's JSON, in
// panel order.
func Queries(data []byte) ([]string, error) {
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, t.Expr)
		}
	}
	return out, nil
}
