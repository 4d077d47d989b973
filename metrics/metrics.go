// Package metrics defines the manager's Prometheus collectors, on a registry
// of their own that cmd/ome-quota-manager serves on /metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every collector.
type Metrics struct {
	Registry *prometheus.Registry

	// Budget gauges, labelled plane, quota, role, resource, flavor.
	BudgetNominal, BudgetAdmitted, BudgetReserved, BudgetBorrowed *prometheus.GaugeVec
	// Capacity gauges, rewritten whole after each measurement.
	CapacityAllocatable, CapacityHighWaterMark *prometheus.GaugeVec
	CapacityUnattributed                       *prometheus.GaugeVec
	// DRAUnbudgeted counts DRA devices per DeviceClass that no mapping
	// names, which no budget covers.
	DRAUnbudgeted *prometheus.GaugeVec
	// Applied counts objects a materialization pass brought to, or confirmed
	// at, their desired state: it rises on every pass. Writes counts real API
	// writes, flat on a quiet cluster. Swept counts deletions of objects no
	// node wants any more.
	Applied, Swept *prometheus.CounterVec
	Writes         *prometheus.CounterVec
	WriteErrors    *prometheus.CounterVec
	// NodeStates counts tree nodes per state.
	NodeStates *prometheus.GaugeVec
	// Events counts events applied by kind; StreamDepth is the queue length;
	// EventLag is the time from receipt to application.
	Events      *prometheus.CounterVec
	StreamDepth prometheus.Gauge
	EventLag    prometheus.Histogram
	// EventLogErrors counts events the event log could not record.
	EventLogErrors prometheus.Counter
	// WebhookVerdicts counts admission answers by operation and verdict.
	WebhookVerdicts *prometheus.CounterVec
	// WebhookRecord counts the webhook's compare-and-swap writes of the
	// admission record by outcome: written, conflict (another replica
	// wrote first: the write is judged again), already (the write was
	// listed), failed.
	WebhookRecord *prometheus.CounterVec
	// WebhookReviewSeconds is the time from a review's arrival to its
	// answer, by verdict.
	WebhookReviewSeconds *prometheus.HistogramVec
	// WebhookSettleSeconds is how long a review waited for the writes
	// admitted before it to reach the state.
	WebhookSettleSeconds prometheus.Histogram
	// Leader is 1 on the replica that holds the lease.
	Leader prometheus.Gauge
}

const ns = "ome_quota"

// New creates and registers every collector.
func New() *Metrics {
	budget := []string{"plane", "quota", "role", "resource", "flavor"}
	pair := []string{"resource", "flavor"}
	gv := func(name, help string, labels []string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	cv := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		Registry:              prometheus.NewRegistry(),
		BudgetNominal:         gv("budget_nominal", "A node's nominal budget per resource and flavor.", budget),
		BudgetAdmitted:        gv("budget_admitted", "What a team's admitted workloads use.", budget),
		BudgetReserved:        gv("budget_reserved", "What a team's workloads hold a quota reservation for.", budget),
		BudgetBorrowed:        gv("budget_borrowed", "What a team uses above its nominal, borrowed from its cohort.", budget),
		CapacityAllocatable:   gv("capacity_allocatable", "Accelerators on Ready, uncordoned nodes, per resource and flavor.", pair),
		CapacityHighWaterMark: gv("capacity_high_water_mark", "The damped peak of installed capacity that budgets are checked against.", pair),
		CapacityUnattributed:  gv("capacity_unattributed", "Capacity on nodes that match no ResourceFlavor, per node, resource and reason.", []string{"node", "resource", "reason"}),
		DRAUnbudgeted:         gv("dra_unbudgeted_devices", "DRA devices published under a DeviceClass that no mapping names, per DeviceClass: no budget covers them.", []string{"deviceclass"}),
		Applied:               cv("backend_applied_total", "Objects a materialization pass brought to, or confirmed at, their desired state.", []string{"kind"}),
		Swept:                 cv("backend_swept_total", "Managed objects deleted because no node wants them.", []string{"kind"}),
		Writes:                cv("backend_writes_total", "Write requests sent to the API server.", []string{"kind", "verb"}),
		WriteErrors:           cv("backend_write_errors_total", "Write requests that failed.", []string{"kind", "verb"}),
		NodeStates:            gv("nodes", "Tree nodes per state.", []string{"state"}),
		Events:                cv("events_total", "Events applied to the state, by kind.", []string{"kind"}),
		StreamDepth:           prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "event_stream_depth", Help: "Events waiting in the stream."}),
		EventLag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "event_lag_seconds",
			Help: "Time from an event's receipt to its application.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}),
		EventLogErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "event_log_errors_total",
			Help: "Events that could not be appended to the recorded event log (--event-log); a replay reports the gap."}),
		WebhookVerdicts: cv("webhook_verdicts_total", "Admission answers, by operation and verdict.", []string{"operation", "verdict"}),
		WebhookRecord:   cv("webhook_record_writes_total", "Compare-and-swap writes of the admission record, by outcome.", []string{"outcome"}),
		Leader:          prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "leader", Help: "1 while this replica holds the leader lease."}),
		WebhookReviewSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "webhook_review_seconds",
			Help: "Time from a review's arrival to its answer, by verdict.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"verdict"}),
		WebhookSettleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "webhook_settle_wait_seconds",
			Help: "How long a review waited for the writes admitted before it to reach the state.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	m.Registry.MustRegister(
		m.BudgetNominal, m.BudgetAdmitted, m.BudgetReserved, m.BudgetBorrowed,
		m.CapacityAllocatable, m.CapacityHighWaterMark, m.CapacityUnattributed, m.DRAUnbudgeted,
		m.Applied, m.Swept, m.Writes, m.WriteErrors, m.NodeStates,
		m.Events, m.StreamDepth, m.EventLag, m.EventLogErrors, m.WebhookVerdicts, m.Leader,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.Registry.MustRegister(m.WebhookRecord, m.WebhookReviewSeconds, m.WebhookSettleSeconds)
	return m
}
