// Package observability runs the guide's scenario against a manager that a
// real Prometheus server (built from tools/kube) scrapes on loopback,
// and evaluates through Prometheus' HTTP API every query of the chart's
// Grafana dashboard and every alert rule of its PrometheusRule; promtool
// checks a live scrape. It also reads the Kubernetes Events the manager
// emits on a freeze with the real kubectl.
package observability
