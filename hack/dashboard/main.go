// Command dashboard writes the Grafana dashboard that the chart ships,
// charts/ome-quota-manager/files/dashboard.json, from metrics/dashboard.
// Run from the repository's root (make generate does).
package main

import (
	"fmt"
	"os"

	"ome.io/quota-manager/metrics/dashboard"
)

func main() {
	out := "charts/ome-quota-manager/files/dashboard.json"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	data, err := dashboard.JSON()
	if err == nil {
		err = os.WriteFile(out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}
