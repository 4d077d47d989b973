// Package failures holds end-to-end tests of faults an adversarial operator
// provokes, on the real control plane with the ome-quota-manager binary:
// Kueue's CRDs missing at start, a replica not ready behind a working TLS
// handshake, thousands of Nodes at start, two replicas on one host, and a
// scraper of /metrics without the right to. docs/failure-modes.md names
// each test beside the fault it covers.
package failures
