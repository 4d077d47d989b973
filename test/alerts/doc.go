// Package alerts checks the alert rules that the chart ships
// (charts/ome-quota-manager/files/alerts.yaml) with promtool, built from
// tools/kube: the rules are valid, each alert has a unit test that
// shows it firing on the series that should raise it and silent on healthy
// ones, and each has a runbook in docs/runbooks.md. On a fleet's series (a
// management plane and two members scraped together, testdata/
// fleet_test.yaml) every alert fires for its own plane and cluster, and
// every query of the chart's dashboard returns one plane's figures.
package alerts
