package dashboard

import (
	"encoding/json"
	"slices"
	"strings"

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

// PlaneVar and ClusterVar are the dashboard's variables: the plane shown
// (workload or management, one at a time) and, on a management plane, the
// member clusters whose series the Fleet row shows.
const (
	PlaneVar   = "$plane"
	ClusterVar = "$cluster"
)

// Every replica reports the same state, so the state's gauges are read
// with max by (...): one series per subject whatever the replica count.
// Every query keeps plane and cluster in its grouping and reads one
// plane: a Prometheus that scrapes a management plane and its members
// (told apart by a cluster target label) never mixes a fleet total with a
// member's figure.
var ds = dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// by is the grouping every aggregation starts with.
const by = "plane, cluster"

// onPlane is what follows a selector of a series without a plane label
// (own being its own labels): a join that takes the plane from
// ome_quota_plane_info and keeps only the dashboard's plane's series. A
// series whose own labels hold cluster (a member's, on a plane) joins the
// plane's ome_quota_plane_info alone: ignoring cluster, the members' info
// series, told apart only by their cluster target label, would collide.
func onPlane(own ...string) string {
	info := `plane="` + PlaneVar + `"`
	if slices.Contains(own, "cluster") {
		info = `plane="management",` + info
	}
	return " * ignoring (" + strings.Join(append(own, "plane"), ", ") + ") group_left (plane) ome_quota_plane_info{" + info + "}"
}

// budget selects a budget gauge, which carries plane itself, on the
// dashboard's plane.
func budget(metric, extra string) string {
	return metric + `{plane="` + PlaneVar + `"` + extra + "}"
}

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

// rate is the per-second rate of a counter summed by plane, cluster and
// the labels given (of its own labels, listed in own).
func rate(metric string, own []string, group ...string) string {
	return "sum by (" + strings.Join(append([]string{by}, group...), ", ") + ") (rate(" + metric + "[" + RateInterval + "])" + onPlane(own...) + ")"
}

// p99 is a histogram's 99th percentile per replica.
func p99(histogram string, own ...string) string {
	return "histogram_quantile(0.99, sum by (" + by + ", instance, le) (rate(" + histogram + "_bucket[" + RateInterval + "])" + onPlane(append(own, "le")...) + "))"
}

// gauge is a state gauge without a plane label, the replicas' max per
// plane, cluster and the labels given.
func gauge(agg, metric, selector string, own []string, group ...string) string {
	return agg + " by (" + strings.Join(append([]string{by}, group...), ", ") + ") (" + metric + selector + onPlane(own...) + ")"
}

func (c *panels) row(title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title).Id(c.nextID())
}

// Build returns the dashboard.
func Build() (dashboard.Dashboard, error) {
	c := &panels{}
	pair := []string{"resource", "flavor"}
	share := []string{"quota", "resource", "flavor", "cluster"}
	held := []string{"quota", "resource", "flavor"}
	members := `{cluster=~"` + ClusterVar + `"}`
	b := dashboard.NewDashboardBuilder("Accelerator quotas").
		Uid(UID).
		Tags([]string{"ome", "quota", "kueue"}).
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("plane").Label("Plane").
			Description("workload: the clusters whose managers write Kueue objects; management: a fleet's plane, whose budgets are fleet totals. One at a time, so that the two are never added.").
			Datasource(ds).Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(ome_quota_plane_info, plane)")}).
			Definition("label_values(ome_quota_plane_info, plane)").
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalDesc)).
		WithVariable(dashboard.NewQueryVariableBuilder("cluster").Label("Member cluster").
			Description("On a management plane, the member clusters the Fleet row shows.").
			Datasource(ds).Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(ome_quota_member_reachable, cluster)")}).
			Definition("label_values(ome_quota_member_reachable, cluster)").
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).IncludeAll(true).AllValue(".*")).
		WithRow(c.row("Health")).
		WithPanel(c.single("Replicas scraped", "none", "Replicas of the quota manager on this plane that Prometheus scrapes (ome_quota_plane_info).",
			q(`count by (`+by+`) (ome_quota_plane_info{plane="`+PlaneVar+`"})`, "{{cluster}}"))).
		WithPanel(c.single("Leaders", "none", "Replicas that hold the leader lease: 1 per cluster when healthy.",
			q(gauge("sum", "ome_quota_leader", "", nil), "{{cluster}}"))).
		WithPanel(c.single("Tree nodes not Ready", "none", "AcceleratorQuotas that break a rule or sit below one that does.",
			q("sum by ("+by+") ("+gauge("max", "(1 - ome_quota_node_ready)", "", []string{"quota", "role", "reason"}, "quota")+")", "{{cluster}}"))).
		WithPanel(c.single("Oldest capacity measurement", "s", "Age of the oldest observedAt stamp on root.",
			q("time() - "+gauge("min", "ome_quota_capacity_observed_timestamp_seconds", "", pair), "{{cluster}}"))).
		WithRow(c.row("Budgets")).
		WithPanel(c.series("Team budgets and admitted", "none", "Each team's nominal budget beside what its admitted workloads use, per resource and flavor. On a management plane: the fleet totals, and the members' use summed.",
			q(`max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_nominal", `,role="ClusterQueue"`)+`)`, "{{quota}} nominal {{resource}}@{{flavor}} {{cluster}}"),
			q(`max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_admitted", "")+`)`, "{{quota}} admitted {{resource}}@{{flavor}} {{cluster}}"))).
		WithPanel(c.series("Borrowed and reserved", "none", "What teams use above their nominal, borrowed from their cohort, and what their workloads reserve.",
			q(`max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_borrowed", "")+`)`, "{{quota}} borrowed {{resource}}@{{flavor}} {{cluster}}"),
			q(`max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_reserved", "")+`)`, "{{quota}} reserved {{resource}}@{{flavor}} {{cluster}}"))).
		WithPanel(c.series("Cohort budgets and the teams below them", "none", "A cohort's nominal beside the admitted usage of the teams it contains.",
			q(`max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_nominal", `,role="Cohort"`)+`)`, "{{quota}} {{resource}}@{{flavor}} {{cluster}}"),
			q(`sum by (`+by+`, resource, flavor) (max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_admitted", "")+`))`, "all teams admitted {{resource}}@{{flavor}} {{cluster}}"))).
		WithPanel(c.list("Tree nodes and their state", "Every AcceleratorQuota with its readiness: reason is Admitted, or the rule it breaks.",
			q(gauge("min", "ome_quota_node_ready", "", []string{"quota", "role", "reason"}, "quota", "role", "reason"), ""))).
		WithRow(c.row("Capacity")).
		WithPanel(c.series("Capacity and high-water mark", "none", "Allocatable (Ready, uncordoned nodes) and installed accelerators, and the damped mark budgets are checked against. On a management plane: the members' summed.",
			q(gauge("max", "ome_quota_capacity_allocatable", "", pair, pair...), "allocatable {{resource}}@{{flavor}} {{cluster}}"),
			q(gauge("max", "ome_quota_capacity_installed", "", pair, pair...), "installed {{resource}}@{{flavor}} {{cluster}}"),
			q(gauge("max", "ome_quota_capacity_high_water_mark", "", pair, pair...), "mark {{resource}}@{{flavor}} {{cluster}}"))).
		WithPanel(c.series("Age of the last measurement", "s", "Time since each pair's observedAt stamp; it should stay below the report interval.",
			q("time() - "+gauge("max", "ome_quota_capacity_observed_timestamp_seconds", "", pair, pair...), "{{resource}}@{{flavor}} {{cluster}}"),
			q(gauge("max", "ome_quota_capacity_report_interval_seconds", "", nil), "report interval {{cluster}}"))).
		WithPanel(c.series("Kubernetes Nodes", "none", "Nodes by how capacity counts them, and nodes whose accelerators no flavor counts.",
			q(gauge("max", "ome_quota_capacity_nodes", "", []string{"state"}, "state"), "{{state}} {{cluster}}"),
			q(gauge("max", "ome_quota_capacity_unattributed_nodes", "", []string{"reason"}, "reason"), "unattributed ({{reason}}) {{cluster}}"))).
		WithPanel(c.series("Tree nodes per state", "none", "AcceleratorQuotas per state: Ready, Frozen, CapacityExceeded, ...",
			q(gauge("max", "ome_quota_nodes", "", []string{"state"}, "state"), "{{state}} {{cluster}}"))).
		WithRow(c.row("Writing to Kueue")).
		WithPanel(c.series("Objects confirmed and written", "ops", "applied_total rises on every pass of the leader; writes are real API requests, flat on a quiet cluster.",
			q(rate("ome_quota_backend_applied_total", []string{"kind"}, "kind"), "confirmed {{kind}} {{cluster}}"),
			q(rate("ome_quota_backend_writes_total", []string{"kind", "verb"}, "kind", "verb"), "written {{kind}} {{verb}} {{cluster}}"),
			q(rate("ome_quota_backend_swept_total", []string{"kind"}, "kind"), "swept {{kind}} {{cluster}}"))).
		WithPanel(c.series("Write errors and apply duration", "short", "Failed writes per second, and the 99th percentile of one node's materialization in seconds.",
			q(rate("ome_quota_backend_write_errors_total", []string{"kind", "verb"}, "kind", "verb"), "errors {{kind}} {{verb}} {{cluster}}"),
			q(p99("ome_quota_backend_apply_seconds"), "pass p99 {{instance}} {{cluster}}"))).
		WithPanel(c.series("Transition Events", "ops", "Kubernetes Events the leader emitted on AcceleratorQuotas, by reason.",
			q(rate("ome_quota_kube_events_total", []string{"reason"}, "reason"), "{{reason}} {{cluster}}"))).
		WithRow(c.row("Events and webhook")).
		WithPanel(c.series("Event lag and stream depth", "s", "99th percentile of the time from an event's receipt to its application, and events waiting.",
			q(p99("ome_quota_event_lag_seconds"), "lag p99 {{instance}} {{cluster}}"),
			q(gauge("max", "ome_quota_event_stream_depth", "", nil, "instance"), "waiting {{instance}} {{cluster}}"))).
		WithPanel(c.series("Events applied", "ops", "Events the state applied per second, by kind.",
			q(rate("ome_quota_events_total", []string{"kind"}, "kind"), "{{kind}} {{cluster}}"))).
		WithPanel(c.series("Webhook verdicts", "ops", "Admission answers per second, by verdict.",
			q(rate("ome_quota_webhook_verdicts_total", []string{"operation", "verdict"}, "verdict"), "{{verdict}} {{cluster}}"))).
		WithPanel(c.series("Webhook latency", "s", "99th percentile of a review's time to answer, and of a tree write's judgement (its wait for related reservations included).",
			q(p99("ome_quota_webhook_review_seconds", "verdict"), "review p99 {{instance}} {{cluster}}"),
			q(p99("ome_quota_webhook_judge_seconds"), "judge p99 {{instance}} {{cluster}}"))).
		WithRow(c.row("Fleet (management plane)")).
		WithPanel(c.series("Member clusters", "none", "On a management plane, 1 while the plane hears from the member cluster, 0 while it does not (its shares and copies are kept); and the copies it lacks or holds behind.",
			q(gauge("max", "ome_quota_member_reachable", members, []string{"cluster"}), "{{cluster}} answering"),
			q(gauge("min", "ome_quota_member_copies_behind", members, []string{"cluster"}), "{{cluster}} copies behind"))).
		WithPanel(c.series("Held by members against the fleet budget", "none", "On a management plane, the most the member clusters together may hold of each fleet budget (their copies as read back, what the plane may have written since, the hold records), beside the budget: above it only while a lowered budget waits for members that do not answer (OmeQuotaFleetOverBudget).",
			q(gauge("max", "ome_quota_fleet_held", "", held, held...), "{{quota}} held {{resource}}@{{flavor}}"),
			q(`max by (`+by+`, quota, resource, flavor) (`+budget("ome_quota_budget_nominal", "")+`) and on (`+by+`, quota, resource, flavor) `+gauge("max", "ome_quota_fleet_held", "", held, held...),
				"{{quota}} budget {{resource}}@{{flavor}}"))).
		WithPanel(c.series("Member silence", "s", "On a management plane, how long since the plane last heard from each member cluster: 0 while it answers.",
			q(gauge("min", "ome_quota_member_silent_seconds", members, []string{"cluster"}), "{{cluster}}"))).
		WithPanel(c.series("Shares per member", "none", "On a management plane, each member cluster's share of each team's fleet budget.",
			q(gauge("max", "ome_quota_budget_share", members, share, "quota", "resource", "flavor"), "{{quota}} {{resource}}@{{flavor}} on {{cluster}}"))).
		WithPanel(c.series("Usage per member", "none", "On a management plane, what each member cluster's Kueue admitted, reserved and borrowed for its copy of each team, as it last reported: the parts of the fleet totals in the Budgets row.",
			q(gauge("max", "ome_quota_budget_share_admitted", members, share, "quota", "resource", "flavor"), "{{quota}} admitted {{resource}}@{{flavor}} on {{cluster}}"),
			q(gauge("max", "ome_quota_budget_share_reserved", members, share, "quota", "resource", "flavor"), "{{quota}} reserved {{resource}}@{{flavor}} on {{cluster}}"),
			q(gauge("max", "ome_quota_budget_share_borrowed", members, share, "quota", "resource", "flavor"), "{{quota}} borrowed {{resource}}@{{flavor}} on {{cluster}}"))).
		WithRow(c.row("Replicas")).
		WithPanel(c.series("Leader", "none", "1 on the replica that holds the lease; the count of times each became leader.",
			q(gauge("max", "ome_quota_leader", "", nil, "instance"), "leader {{instance}} {{cluster}}"),
			q(gauge("max", "ome_quota_leader_transitions_total", "", nil, "instance"), "became leader {{instance}} {{cluster}}"))).
		WithPanel(c.list("Builds", "The version each replica runs.",
			q(gauge("max", "ome_quota_build_info", "", []string{"version", "revision", "goversion"}, "instance", "version", "revision", "goversion"), "")))
	return b.Build()
}

// PlaneMetrics are the metrics only a management plane publishes: the
// panels that read them are empty on a workload cluster.
var PlaneMetrics = []string{"ome_quota_member_reachable", "ome_quota_member_silent_seconds", "ome_quota_budget_share", "ome_quota_member_copies_behind", "ome_quota_fleet_held"}

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

// Expand is a panel's query as Grafana sends it: the rate window, the
// plane and the member clusters' regular expression (".*" for all) in
// place of their variables.
func Expand(expr, rateWindow, plane, clusters string) string {
	return strings.NewReplacer(RateInterval, rateWindow, PlaneVar, plane, ClusterVar, clusters).Replace(expr)
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
