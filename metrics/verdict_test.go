package metrics_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/metrics"
)

// The webhook-errors alert counts the verdict label the webhook gives a
// review it could not judge: the chart's rule must name that value.
func TestWebhookErrorsAlertCountsUnavailable(t *testing.T) {
	rules, err := os.ReadFile("../charts/ome-quota-manager/files/alerts.yaml")
	require.NoError(t, err)
	require.Contains(t, string(rules), `ome_quota_webhook_verdicts_total{verdict="`+metrics.VerdictUnavailable+`"}`)
}
