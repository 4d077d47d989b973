// Package dashboard builds the quota manager's Grafana dashboard as code,
// with the Grafana Foundation SDK. `make generate` writes it to
// charts/ome-quota-manager/files/dashboard.json (go run ./hack/observability),
// which the chart ships in a ConfigMap for Grafana's dashboard sidecar
// (dashboards.enabled). A test fails when the committed file differs from
// what Build generates; the e2e suite evaluates every panel's query against
// a real Prometheus scraping a running manager.
package dashboard
