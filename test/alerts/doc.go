// Package alerts checks the alert rules that the chart ships
// (charts/ome-quota-manager/files/alerts.yaml) with promtool, built from
// tools/prometheus: the rules are valid, each alert has a unit test that
// shows it firing on the series that should raise it and silent on healthy
// ones, and each has a runbook in docs/runbooks.md.
package alerts
