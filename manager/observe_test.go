package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// Scrapes run while the consumer applies events: each reads a consistent
// snapshot under the reducer's lock (run with -race), and once the events
// are applied the gauges show the state's figures.
func TestMetricsReadStateWhileEventsApply(t *testing.T) {
	o := DefaultOptions()
	o.EnrolledNamespaces = []string{"ml-serving"}
	m, err := New(o, &rest.Config{Host: "http://127.0.0.1:1"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	go func() { consumed <- m.consume(ctx) }()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var scrapes atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := m.metrics.Registry.Gather(); err != nil {
				t.Error(err)
				return
			}
			scrapes.Add(1)
		}
	}()
	// Scrapes run before, while and after the events apply.
	require.Eventually(t, func() bool { return scrapes.Load() > 0 }, 10*time.Second, time.Millisecond)

	now := time.Unix(1_800_000_000, 0)
	publish := func(ev events.Event) {
		_, err := m.stream.Publish(ctx, ev)
		require.NoError(t, err)
	}
	publish(events.ConfigChanged(now, o.EventsConfig()))
	publish(events.FlavorUpserted(now, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}))
	gpus := func(n string) map[string]resource.Quantity {
		return map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse(n)}
	}
	for i := range 4 {
		publish(events.NodeUpserted(now, &events.Node{Name: fmt.Sprintf("gpu-%d", i), Labels: map[string]string{"gpu": "a100"},
			Capacity: gpus("8"), Allocatable: gpus("8"), Ready: i != 3, Unschedulable: i == 2}))
	}
	publish(events.NodeUpserted(now, &events.Node{Name: "stray", Capacity: gpus("2"), Allocatable: gpus("2"), Ready: true}))
	publish(events.Synced(now))
	for _, q := range aqtest.GuideTree() {
		publish(events.QuotaUpserted(now, &events.Quota{Name: q.Name, Generation: 1, Spec: q.Spec}))
	}
	require.Eventually(t, func() bool { return m.stream.Len() == 0 && m.metricsSnapshot().Budgets != nil }, 10*time.Second, 10*time.Millisecond)
	// The last event may still be applying: wait for the state to hold every node.
	require.Eventually(t, func() bool { return len(m.metricsSnapshot().Nodes) == len(aqtest.GuideTree()) }, 10*time.Second, 10*time.Millisecond)
	applied := scrapes.Load()
	require.Eventually(t, func() bool { return scrapes.Load() > applied }, 10*time.Second, time.Millisecond)
	close(stop)
	wg.Wait()

	reg := m.metrics.Registry
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ome_quota_capacity_nodes Kubernetes Nodes by how capacity counts them: schedulable, cordoned, not_ready.
# TYPE ome_quota_capacity_nodes gauge
ome_quota_capacity_nodes{state="cordoned"} 1
ome_quota_capacity_nodes{state="not_ready"} 1
ome_quota_capacity_nodes{state="schedulable"} 3
# HELP ome_quota_capacity_unattributed Installed capacity that no ResourceFlavor's budget can use, per resource and reason.
# TYPE ome_quota_capacity_unattributed gauge
ome_quota_capacity_unattributed{reason="NoMatchingFlavor",resource="nvidia.com/gpu"} 2
# HELP ome_quota_capacity_unattributed_nodes Nodes carrying unattributed capacity, per reason.
# TYPE ome_quota_capacity_unattributed_nodes gauge
ome_quota_capacity_unattributed_nodes{reason="AmbiguousFlavor"} 0
ome_quota_capacity_unattributed_nodes{reason="NoMatchingFlavor"} 1
# HELP ome_quota_capacity_unavailable Accelerators on cordoned or NotReady nodes, per resource and flavor: installed, so in the mark, but not allocatable.
# TYPE ome_quota_capacity_unavailable gauge
ome_quota_capacity_unavailable{flavor="a100",resource="google.com/tpu"} 0
ome_quota_capacity_unavailable{flavor="a100",resource="nvidia.com/gpu"} 16
# HELP ome_quota_capacity_high_water_mark The damped peak of installed capacity that budgets are checked against.
# TYPE ome_quota_capacity_high_water_mark gauge
ome_quota_capacity_high_water_mark{flavor="a100",resource="google.com/tpu"} 0
ome_quota_capacity_high_water_mark{flavor="a100",resource="nvidia.com/gpu"} 32
# HELP ome_quota_capacity_allocatable Accelerators on Ready, uncordoned nodes, per resource and flavor.
# TYPE ome_quota_capacity_allocatable gauge
ome_quota_capacity_allocatable{flavor="a100",resource="google.com/tpu"} 0
ome_quota_capacity_allocatable{flavor="a100",resource="nvidia.com/gpu"} 16
# HELP ome_quota_enrolled_namespaces Namespaces enrolled for LocalQueues; while 0 nothing is written to Kueue.
# TYPE ome_quota_enrolled_namespaces gauge
ome_quota_enrolled_namespaces 1
# HELP ome_quota_capacity_report_interval_seconds The configured --capacity-report-interval; 0 when the refresh of observedAt is off.
# TYPE ome_quota_capacity_report_interval_seconds gauge
ome_quota_capacity_report_interval_seconds 60
`), "ome_quota_capacity_nodes", "ome_quota_capacity_unattributed", "ome_quota_capacity_unattributed_nodes", "ome_quota_capacity_unavailable",
		"ome_quota_capacity_high_water_mark", "ome_quota_capacity_allocatable", "ome_quota_enrolled_namespaces",
		"ome_quota_capacity_report_interval_seconds"))
	n, err := testutil.GatherAndCount(reg, "ome_quota_node_ready")
	require.NoError(t, err)
	require.Equal(t, len(aqtest.GuideTree()), n, "one readiness series per tree node")
	n, err = testutil.GatherAndCount(reg, "ome_quota_budget_admitted")
	require.NoError(t, err)
	require.Equal(t, 2, n, "usage series for the two teams' budgets only")
	cancel()
	require.NoError(t, <-consumed)
}
