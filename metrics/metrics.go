package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/util/workqueue"
)

// Metrics holds the instrumented collectors; the state's gauges come from
// the collector that SetSource feeds.
type Metrics struct {
	Registry *prometheus.Registry

	// Applied counts objects the shell brought to, or confirmed
	// at, their desired state: it rises on every pass. Writes counts real API
	// writes, flat on a quiet cluster. Swept counts deletions of objects no
	// node wants any more.
	Applied, Swept *prometheus.CounterVec
	Writes         *prometheus.CounterVec
	WriteErrors    *prometheus.CounterVec
	// ApplySeconds is the duration of one node's comparison and writes.
	ApplySeconds prometheus.Histogram
	// FullComparison counts the nodes each tick's full comparison looked
	// at, by result: queued, paced or unchanged.
	FullComparison *prometheus.CounterVec
	// Events counts events applied by kind; EventLag is the time from
	// receipt to application.
	Events   *prometheus.CounterVec
	EventLag prometheus.Histogram
	// EventLogErrors counts events the event log could not record.
	EventLogErrors prometheus.Counter
	// WebhookVerdicts counts admission answers by operation and verdict.
	WebhookVerdicts *prometheus.CounterVec
	// WebhookLedger counts judged writes by what they did to the
	// admission ledger; WebhookUncertain the reviews judged with related
	// reservations not yet seen to land.
	WebhookLedger    *prometheus.CounterVec
	WebhookUncertain prometheus.Counter
	// WebhookBound counts the reviews judged on the bound of more than
	// three related reservations, by outcome; WebhookWaits the reviews
	// that had to wait, by what for and outcome; WebhookWaiting those
	// waiting now.
	WebhookBound   *prometheus.CounterVec
	WebhookWaits   *prometheus.CounterVec
	WebhookWaiting prometheus.Gauge
	// WebhookCallersAuthenticated says whether the webhook's callers must
	// present a client certificate; WebhookPolicyOutside counts the API
	// server's addresses its NetworkPolicy does not admit.
	WebhookCallersAuthenticated prometheus.Gauge
	WebhookPolicyOutside        *prometheus.GaugeVec
	// WebhookReviewSeconds is the time from a review's arrival to its
	// answer, by verdict.
	WebhookReviewSeconds *prometheus.HistogramVec
	// WebhookPendingSeconds is the time to judge a tree write.
	WebhookPendingSeconds prometheus.Histogram
	// Leader is 1 on the replica that holds the lease; LeaderTransitions
	// counts the times this replica became the leader.
	Leader            prometheus.Gauge
	LeaderTransitions prometheus.Counter
	// DRAMappingsDiffer compares Kueue's DRA mappings with the manager's,
	// by the ConfigMap read; a series exists while it can be read.
	DRAMappingsDiffer *prometheus.GaugeVec
	// Undecodable names the AcceleratorQuotas the cache cannot decode;
	// StatusUnwritten the status fields the installed CRD lacks.
	Undecodable     *prometheus.GaugeVec
	StatusUnwritten *prometheus.GaugeVec
	// KubeEvents counts Kubernetes Events emitted on transitions, by reason.
	KubeEvents *prometheus.CounterVec
	// Queues is the metrics provider of the shell's work queues.
	Queues workqueue.MetricsProvider

	source     atomic.Pointer[func() Snapshot]
	collectors []prometheus.Collector
	// now reads the wall clock at scrape time, for the gauges that say
	// how long ago something happened.
	now func() time.Time
}

// The result label values of FullComparison.
const (
	ComparisonQueued    = "queued"
	ComparisonPaced     = "paced"
	ComparisonUnchanged = "unchanged"
)

// VerdictUnavailable is the webhook's verdict label for a review it could
// not judge (the replica is not ready): the webhook-errors alert counts it.
const VerdictUnavailable = "unavailable"

// ObjectKinds are the kind label values of the backend counters, created
// at 0 so that a rate over them exists before the first write.
var ObjectKinds = []string{"Cohort", "ClusterQueue", "LocalQueue"}

// New creates and registers every collector.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), now: time.Now}
	m.Applied = counterVec(mApplied)
	m.Swept = counterVec(mSwept)
	m.Writes = counterVec(mWrites)
	m.WriteErrors = counterVec(mWriteErrors)
	m.ApplySeconds = histogram(mApplySeconds)
	m.FullComparison = counterVec(mFullComparison)
	m.Events = counterVec(mEvents)
	m.EventLag = histogram(mEventLag)
	m.EventLogErrors = counter(mEventLogErrors)
	m.WebhookVerdicts = counterVec(mWebhookVerdicts)
	m.WebhookLedger = counterVec(mWebhookLedger)
	m.WebhookUncertain = counter(mWebhookUncertain)
	m.WebhookBound = counterVec(mWebhookBound)
	m.WebhookWaits = counterVec(mWebhookWaits)
	m.WebhookWaiting = gauge(mWebhookWaiting)
	m.WebhookCallersAuthenticated = gauge(mWebhookCallers)
	m.WebhookPolicyOutside = gaugeVec(mWebhookPolicyOutside)
	m.WebhookReviewSeconds = histogramVec(mWebhookReview)
	m.WebhookPendingSeconds = histogram(mWebhookJudge)
	m.Leader = gauge(mLeader)
	m.DRAMappingsDiffer = gaugeVec(mDRAMappingsDiffer)
	m.Undecodable = gaugeVec(mUndecodable)
	m.StatusUnwritten = gaugeVec(mStatusUnwritten)
	m.LeaderTransitions = counter(mLeaderTransitions)
	m.KubeEvents = counterVec(mKubeEvents)
	queues := newQueueMetrics()
	m.Queues = queues
	// The series the alert rules read exist at 0 from the start, so that a
	// rate over them is 0, not absent, until something happens.
	for _, k := range ObjectKinds {
		m.Applied.WithLabelValues(k)
		m.Swept.WithLabelValues(k)
		m.WriteErrors.WithLabelValues(k, "apply")
	}
	m.WriteErrors.WithLabelValues("status", "apply-status")
	for _, r := range []string{ComparisonQueued, ComparisonPaced, ComparisonUnchanged} {
		m.FullComparison.WithLabelValues(r)
	}
	for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
		m.WebhookVerdicts.WithLabelValues(op, VerdictUnavailable)
	}
	for _, o := range []string{"admitted", "refused", "unbounded"} {
		m.WebhookBound.WithLabelValues(o)
	}
	for _, f := range []string{"base", "settle"} {
		for _, o := range []string{"waited", "full"} {
			m.WebhookWaits.WithLabelValues(f, o)
		}
	}
	m.register(
		m.Applied, m.Swept, m.Writes, m.WriteErrors, m.ApplySeconds, m.FullComparison,
		m.Events, m.EventLag, m.EventLogErrors,
		m.WebhookVerdicts, m.WebhookLedger, m.WebhookUncertain, m.WebhookBound, m.WebhookWaits, m.WebhookWaiting, m.WebhookCallersAuthenticated, m.WebhookPolicyOutside, m.WebhookReviewSeconds, m.WebhookPendingSeconds,
		m.Leader, m.LeaderTransitions, m.KubeEvents, m.DRAMappingsDiffer, m.Undecodable, m.StatusUnwritten,
		newBuildInfo(), &stateCollector{m: m},
	)
	m.register(queues.collectors()...)
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) register(cs ...prometheus.Collector) {
	m.Registry.MustRegister(cs...)
	m.collectors = append(m.collectors, cs...)
}

// SetSource gives the scrape-time collector the function that takes a
// snapshot of the state. Until it is set, the state's gauges are absent.
func (m *Metrics) SetSource(f func() Snapshot) { m.source.Store(&f) }

func counterVec(s Spec) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: s.Name, Help: s.Help}, s.Labels)
}

func gaugeVec(s Spec) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: s.Name, Help: s.Help}, s.Labels)
}

func counter(s Spec) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: s.Name, Help: s.Help})
}

func gauge(s Spec) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: s.Name, Help: s.Help})
}

func histogram(s Spec) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: s.Name, Help: s.Help, Buckets: s.Buckets})
}

func histogramVec(s Spec) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: s.Name, Help: s.Help, Buckets: s.Buckets}, s.Labels)
}
