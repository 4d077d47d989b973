package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// On a management plane, each budget of the fleet tree has a series of
// what the members may hold of it; a workload cluster has none.
func TestFleetHeldAtScrape(t *testing.T) {
	m := New()
	snap := sample()
	m.SetSource(func() Snapshot { return snap })
	n, err := testutil.GatherAndCount(m.Registry, mFleetHeld.Name)
	require.NoError(t, err)
	require.Zero(t, n, "a workload cluster has no fleet to hold")

	snap.Plane = "management"
	snap.FleetHeld = []FleetHeld{{Quota: "ml", Resource: "nvidia.com/gpu", Flavor: "a100", Held: 12},
		{Quota: "team-a", Resource: "nvidia.com/gpu", Flavor: "a100", Held: 8}}
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP ome_quota_fleet_held `+mFleetHeld.Help+`
# TYPE ome_quota_fleet_held gauge
ome_quota_fleet_held{flavor="a100",quota="ml",resource="nvidia.com/gpu"} 12
ome_quota_fleet_held{flavor="a100",quota="team-a",resource="nvidia.com/gpu"} 8
`), mFleetHeld.Name))
}
