package manager

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics is client-go's workqueue metrics provider on the manager's
// registry: depth, adds, latency, work duration and retries per queue
// (label name: urgent or bulk).
type queueMetrics struct {
	depth                   *prometheus.GaugeVec
	adds, retries           *prometheus.CounterVec
	latency, work           *prometheus.HistogramVec
	unfinished, longestRuns *prometheus.GaugeVec
}

func newQueueMetrics(reg prometheus.Registerer) *queueMetrics {
	buckets := prometheus.ExponentialBuckets(0.001, 4, 10)
	q := &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ome_quota_workqueue_depth",
			Help: "Nodes waiting in the shell's work queue."}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ome_quota_workqueue_adds_total",
			Help: "Nodes added to the shell's work queue."}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ome_quota_workqueue_retries_total",
			Help: "Nodes put back into the shell's work queue after a failed write."}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ome_quota_workqueue_queue_duration_seconds",
			Help: "How long a node waits in the work queue.", Buckets: buckets}, []string{"name"}),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ome_quota_workqueue_work_duration_seconds",
			Help: "How long comparing and writing one node takes.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ome_quota_workqueue_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"}),
		longestRuns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ome_quota_workqueue_longest_running_processor_seconds",
			Help: "Seconds the longest running node has been worked on."}, []string{"name"}),
	}
	reg.MustRegister(q.depth, q.adds, q.retries, q.latency, q.work, q.unfinished, q.longestRuns)
	return q
}

func (q *queueMetrics) NewDepthMetric(n string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(n)
}
func (q *queueMetrics) NewAddsMetric(n string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(n)
}
func (q *queueMetrics) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(n)
}
func (q *queueMetrics) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(n)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(n)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return q.longestRuns.WithLabelValues(n)
}
func (q *queueMetrics) NewRetriesMetric(n string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(n)
}
