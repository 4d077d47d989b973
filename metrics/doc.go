// Package metrics defines the manager's Prometheus metrics, on a registry
// of their own that cmd/ome-quota-manager serves on /metrics.
//
// Counters and histograms are instrumented where things happen (the
// applier, the consumer, the webhook). Everything that describes the
// state (budgets, capacity, node states, the event stream's depth) is read
// at scrape time by a collector from a consistent snapshot that the
// manager takes under the reducer's lock, so a series never vanishes in
// the middle of a scrape and disappears exactly when its cause does.
//
// Every metric is declared once in the catalog (catalog.go); the
// collectors are built from it and docs/metrics.md is generated from it
// (go run ./hack/observability, part of make generate). A test fails when the
// document, the catalog and the registry disagree.
package metrics
