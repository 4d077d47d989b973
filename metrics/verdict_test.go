package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/webhook"
)

// The alert rules count the webhook's own verdict label.
func TestVerdictUnavailableIsTheWebhooks(t *testing.T) {
	require.Equal(t, webhook.VerdictUnavailable, metrics.VerdictUnavailable)
}
