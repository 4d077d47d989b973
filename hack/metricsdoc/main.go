// Command metricsdoc writes docs/metrics.md, the table of the manager's
// metrics, from metrics.Catalog. Run from the repository's root (make
// generate does).
package main

import (
	"fmt"
	"os"

	"ome.io/quota-manager/metrics"
)

func main() {
	out := "docs/metrics.md"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	if err := os.WriteFile(out, []byte(metrics.Table()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "metricsdoc:", err)
		os.Exit(1)
	}
}
