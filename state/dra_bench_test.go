package state

import (
	"fmt"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/events"
)

// benchSlice is node i's pool: one slice of eight GPUs, each consuming its
// own 40Gi counter set, and one slice with the counter sets.
func benchSlices(i int, gen int64) []*events.ResourceSlice {
	node := fmt.Sprintf("node-%05d", i)
	gpus := &events.ResourceSlice{Name: node + "-gpus", Driver: "gpu.nvidia.com", Pool: node, Generation: gen, SliceCount: 2, Access: events.Access{NodeName: node}}
	sets := &events.ResourceSlice{Name: node + "-counters", Driver: "gpu.nvidia.com", Pool: node, Generation: gen, SliceCount: 2, Access: events.Access{NodeName: node}}
	for g := range 8 {
		set := fmt.Sprintf("gpu-%d", g)
		kind := "gpu"
		gpus.Devices = append(gpus.Devices, events.Device{
			Name:             set,
			Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: &kind}},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}}}},
		})
		sets.SharedCounters = append(sets.SharedCounters, resourcev1.CounterSet{Name: set, Counters: map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}}})
	}
	return []*events.ResourceSlice{sets, gpus}
}

// draCluster is benchCluster with the guide's two mappings, the GPU class,
// and slices/2 nodes' pools of benchSlices.
func draCluster(b *testing.B, slices int) *State {
	b.Helper()
	s := benchCluster(b, slices/2)
	cfg := s.Config()
	cfg.DeviceClassMappings = []events.DeviceClassMapping{
		{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com"}},
		{Name: "gpu.memory", DeviceClassNames: []string{"gpu.nvidia.com"}, Sources: []events.MappingSource{{Type: events.SourceCounter,
			Counter: &events.CounterSource{Name: "memory", Driver: "gpu.nvidia.com"}}}},
	}
	evs := []events.Event{
		events.ConfigChanged(t0, cfg),
		events.DeviceClassUpserted(t0, gpuClass(0)),
	}
	for i := range slices / 2 {
		for _, sl := range benchSlices(i, 1) {
			evs = append(evs, events.ResourceSliceUpserted(t0, sl))
		}
	}
	applyAll(s, evs...)
	if got := s.HighWaterMark(Pair{"gpu.memory", "p0"}); got != Amount((slices/2+benchFlavors-1)/benchFlavors)*8*40*1024*1024*1024*unit {
		b.Fatalf("gpu.memory on p0 is %s", got)
	}
	return s
}

// gpuClass is the GPU DeviceClass; i varies its selector's text, not what
// it selects.
func gpuClass(i int) *events.DeviceClass {
	return &events.DeviceClass{Name: "gpu.nvidia.com", Selectors: []string{
		fmt.Sprintf("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu' && %d >= 0", i%2)}}
}

// BenchmarkDeviceClassEvent is the cost of a DeviceClass change, which
// evaluates every device again: it grows with the number of slices.
func BenchmarkDeviceClassEvent(b *testing.B) {
	for _, slices := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("slices=%d", slices), func(b *testing.B) {
			s := draCluster(b, slices)
			seq := s.LastSeq()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ev := events.DeviceClassUpserted(t0, gpuClass(i+1))
				seq++
				ev.Seq, ev.Time = seq, t0.Add(time.Duration(i)*time.Second)
				s.Apply(ev)
			}
		})
	}
}

// BenchmarkResourceSliceEvent is the cost of one ResourceSlice event (a
// node's GPU slice republished, in turn across the cluster) with both the
// device-count and the counter mapping: it must not grow with the number
// of slices.
func BenchmarkResourceSliceEvent(b *testing.B) {
	for _, slices := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("slices=%d", slices), func(b *testing.B) {
			s := draCluster(b, slices)
			flip := make([][2]events.Event, slices/2)
			for i := range flip {
				flip[i] = [2]events.Event{events.ResourceSliceUpserted(t0, benchSlices(i, 1)[1]), events.ResourceSliceUpserted(t0, benchSlices(i, 1)[1])}
				flip[i][0].ResourceSlice.Devices = flip[i][0].ResourceSlice.Devices[:7] // a GPU goes away, and comes back
			}
			seq := s.LastSeq()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ev := flip[i%len(flip)][(i/len(flip))%2]
				seq++
				ev.Seq, ev.Time = seq, t0.Add(time.Duration(i)*time.Second)
				s.Apply(ev)
			}
		})
	}
}
