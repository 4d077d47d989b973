// Command observability writes the generated observability files from their
// code: docs/metrics.md from the metrics catalog (metrics.Table) and the
// chart's Grafana dashboard, charts/ome-quota-manager/files/dashboard.json
// (metrics/dashboard). Run from the repository's root (make generate does).
package main

import (
	"fmt"
	"os"

	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/metrics/dashboard"
)

func main() {
	board, err := dashboard.JSON()
	if err == nil {
		err = os.WriteFile("docs/metrics.md", []byte(metrics.Table()), 0o644)
	}
	if err == nil {
		err = os.WriteFile("charts/ome-quota-manager/files/dashboard.json", board, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}
