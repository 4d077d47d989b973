package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

const shellQueue = "shell work queues"

var (
	queueBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	queueLabels  = []string{"name"}

	mQueueDepth = Spec{Name: "ome_quota_workqueue_depth", Type: Gauge, Labels: queueLabels, Source: shellQueue,
		Help: "Nodes waiting in the shell's work queue (name: urgent or bulk)."}
	mQueueAdds = Spec{Name: "ome_quota_workqueue_adds_total", Type: Counter, Labels: queueLabels, Source: shellQueue,
		Help: "Nodes added to the shell's work queue."}
	mQueueRetries = Spec{Name: "ome_quota_workqueue_retries_total", Type: Counter, Labels: queueLabels, Source: shellQueue,
		Help: "Nodes put back into the shell's work queue after a failed write."}
	mQueueLatency = Spec{Name: "ome_quota_workqueue_queue_duration_seconds", Type: Histogram, Labels: queueLabels, Source: shellQueue,
		Buckets: queueBuckets, Help: "How long a node waits in the work queue."}
	mQueueWork = Spec{Name: "ome_quota_workqueue_work_duration_seconds", Type: Histogram, Labels: queueLabels, Source: shellQueue,
		Buckets: queueBuckets, Help: "How long comparing and writing one node takes."}
	mQueueUnfinished = Spec{Name: "ome_quota_workqueue_unfinished_work_seconds", Type: Gauge, Labels: queueLabels, Source: shellQueue,
		Help: "Seconds of work in progress not yet observed by work_duration."}
	mQueueLongest = Spec{Name: "ome_quota_workqueue_longest_running_processor_seconds", Type: Gauge, Labels: queueLabels, Source: shellQueue,
		Help: "Seconds the longest running node has been worked on."}
)

// queueMetrics is client-go's work queue metrics provider on the manager's
// registry, one series per queue name.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	return &queueMetrics{
		depth: gaugeVec(mQueueDepth), unfinished: gaugeVec(mQueueUnfinished), longest: gaugeVec(mQueueLongest),
		adds: counterVec(mQueueAdds), retries: counterVec(mQueueRetries),
		latency: histogramVec(mQueueLatency), work: histogramVec(mQueueWork),
	}
}

func (q *queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.depth, q.unfinished, q.longest, q.adds, q.retries, q.latency, q.work}
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
	return q.longest.WithLabelValues(n)
}
func (q *queueMetrics) NewRetriesMetric(n string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(n)
}
