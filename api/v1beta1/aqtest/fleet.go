package aqtest

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// FleetEvents is a management plane's stream: the configuration of members
// east and west, each reporting nvidia.com/gpu on flavor a100 with the
// high-water mark given, then the quotas, each with uid "uid-NAME" and
// generation 1.
func FleetEvents(t0 time.Time, east, west string, quotas ...*v1beta1.AcceleratorQuota) []events.Event {
	c := events.DefaultConfig()
	c.Mode, c.Members = events.ModeManagement, []string{"east", "west"}
	gpus := func(n string) []events.MemberCapacity {
		return []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100", Allocatable: resource.MustParse(n), HighWaterMark: resource.MustParse(n)}}
	}
	evs := []events.Event{events.ConfigChanged(t0, c), events.Synced(t0),
		events.MemberSeen(t0, "east", []string{"a100"}, gpus(east)), events.MemberSeen(t0, "west", []string{"a100"}, gpus(west))}
	for _, aq := range quotas {
		evs = append(evs, events.QuotaUpserted(t0, &events.Quota{Name: aq.Name, UID: "uid-" + aq.Name, Generation: 1, Spec: aq.Spec}))
	}
	return evs
}
