package state

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// source reads choices from fuzz input; once it runs out, every choice is 0.
type source struct {
	data []byte
	i    int
}

func (s *source) more() bool { return s.i < len(s.data) }

func (s *source) pick(n int) int {
	if s.i >= len(s.data) {
		return 0
	}
	b := s.data[s.i]
	s.i++
	return int(b) % n
}

func (s *source) flag() bool { return s.pick(2) == 1 }

func oneOf[T any](s *source, xs ...T) T { return xs[s.pick(len(xs))] }

var (
	fuzzQuotas    = []string{v1beta1.RootName, "a", "b", "c", "d", "e"}
	fuzzFlavors   = []string{"f1", "f2", "f3"}
	fuzzResources = []string{"amd.com/gpu", "google.com/tpu", "nvidia.com/gpu"}
	fuzzNodes     = []string{"n0", "n1", "n2", "n3", "n4", "n5"}
)

// maxEvents bounds a generated sequence: over this small name space a
// longer one adds little, and the fuzzer's inputs grow to megabytes.
const maxEvents = 500

// genEvents turns bytes into a sequence of events over a small name space,
// so that they collide: parents that come and go, cycles, flavors matching
// and unmatching nodes, marks rising and falling, invalid events.
func genEvents(data []byte) []events.Event {
	s := &source{data: data}
	clock := time.Date(2026, 10, 5, 9, 40, 0, 0, time.UTC)
	var out []events.Event
	qty := func(max int) resource.Quantity {
		return *resource.NewQuantity(int64(s.pick(max+1)), resource.DecimalSI)
	}
	for s.more() && len(out) < maxEvents {
		clock = clock.Add(time.Duration(s.pick(90)) * time.Second)
		var ev events.Event
		switch s.pick(13) {
		case 0, 1:
			// Mostly a tree: inner names are Cohorts under an earlier name,
			// the last two teams; sometimes anything goes.
			idx := s.pick(len(fuzzQuotas))
			name := fuzzQuotas[idx]
			q := &events.Quota{Name: name, Generation: int64(s.pick(4))}
			q.Spec.Role = v1beta1.RoleCohort
			if idx >= 4 {
				q.Spec.Role = v1beta1.RoleClusterQueue
			}
			switch s.pick(16) {
			case 0:
				q.Spec.Role = "Odd"
			case 1, 2:
				q.Spec.Role = oneOf(s, v1beta1.RoleCohort, v1beta1.RoleClusterQueue)
			}
			parent := v1beta1.RootName
			switch k := s.pick(16); {
			case k == 0:
				parent = ""
			case k == 1:
				parent = "x"
			case k <= 4:
				parent = oneOf(s, fuzzQuotas...)
			case idx > 1:
				parent = fuzzQuotas[s.pick(idx)]
			}
			if parent != "" && (name != v1beta1.RootName || s.pick(8) == 0) {
				q.Spec.ParentRef = &v1beta1.ParentReference{Name: parent}
			}
			if s.pick(8) == 0 {
				tier := int32(1)
				q.Spec.PriorityTier = &tier
			}
			seen := map[Pair]bool{}
			for range s.pick(4) {
				// Mostly one pair, so that budgets meet in containment.
				p := Pair{"nvidia.com/gpu", "f1"}
				if s.pick(3) == 0 {
					p = Pair{oneOf(s, fuzzResources...), oneOf(s, fuzzFlavors...)}
				}
				if s.pick(10) == 0 {
					p.Flavor = "gone"
				}
				if seen[p] {
					continue
				}
				seen[p] = true
				b := v1beta1.Budget{ResourceName: p.Resource, ResourceFlavor: p.Flavor, Nominal: qty(24)}
				if s.pick(6) == 0 {
					l := qty(4)
					b.BorrowingLimit = &l
				}
				if s.pick(6) == 0 {
					l := qty(4)
					b.LendingLimit = &l
				}
				q.Spec.Budgets = append(q.Spec.Budgets, b)
			}
			if name == v1beta1.RootName {
				for range s.pick(3) {
					q.Capacity = append(q.Capacity, v1beta1.CapacityStatus{
						ResourceName: oneOf(s, fuzzResources...), ResourceFlavor: oneOf(s, fuzzFlavors...),
						Allocatable: qty(40), HighWaterMark: qty(40),
						ObservedAt: metav1.NewTime(clock.Add(-time.Duration(s.pick(120)) * time.Second)),
					})
				}
			}
			ev = events.QuotaUpserted(clock, q)
		case 2:
			name := oneOf(s, fuzzQuotas[1:]...)
			if s.pick(4) == 0 {
				name = v1beta1.RootName
			}
			ev = events.Deleted(clock, events.KindAcceleratorQuota, name)
		case 3, 4:
			n := &events.Node{Name: oneOf(s, fuzzNodes...), Ready: s.pick(4) != 0, Unschedulable: s.pick(4) == 0,
				Labels: map[string]string{}, Capacity: map[string]resource.Quantity{}, Allocatable: map[string]resource.Quantity{}}
			if pool := oneOf(s, "f1", "f2", ""); pool != "" {
				n.Labels["pool"] = pool
			}
			n.Labels["zone"] = oneOf(s, "z1", "z2")
			for _, r := range fuzzResources {
				switch s.pick(4) {
				case 1:
					n.Capacity[r] = qty(16)
					n.Allocatable[r] = n.Capacity[r]
				case 2:
					n.Capacity[r] = qty(16)
					n.Allocatable[r] = qty(16)
				case 3:
					n.Allocatable[r] = qty(8)
				}
			}
			ev = events.NodeUpserted(clock, n)
		case 5:
			ev = events.Deleted(clock, events.KindNode, oneOf(s, fuzzNodes...))
		case 6:
			f := &events.Flavor{Name: oneOf(s, fuzzFlavors...)}
			switch s.pick(4) {
			case 0:
				f.NodeLabels = map[string]string{"pool": f.Name}
			case 1:
				f.NodeLabels = map[string]string{"zone": oneOf(s, "z1", "z2")}
			case 2:
				f.NodeLabels = map[string]string{"pool": oneOf(s, "f1", "f2"), "zone": oneOf(s, "z1", "z2")}
			}
			ev = events.FlavorUpserted(clock, f)
		case 7:
			ev = events.Deleted(clock, events.KindResourceFlavor, oneOf(s, fuzzFlavors...))
		case 8:
			ev = oneOf(s, events.Tick(clock), events.Synced(clock))
		case 9:
			cfg := events.Config{
				MaxTreeDepth: s.pick(4), HysteresisPercent: oneOf(s, 0, 10, 25, 50),
				ReportInterval: metav1.Duration{Duration: oneOf(s, time.Duration(0), 30*time.Second, time.Minute)},
			}
			for _, r := range fuzzResources {
				if s.pick(3) != 0 {
					cfg.MeasuredResources = append(cfg.MeasuredResources, r)
				}
			}
			ev = events.ConfigChanged(clock, cfg)
		case 10:
			if s.flag() {
				ev = events.MeasureFailed(clock, "nodes is forbidden")
			} else {
				name := oneOf(s, fuzzQuotas...)
				ev = events.QueueUpserted(clock, &events.Queue{Name: name, Managed: s.pick(4) != 0,
					Usage: []events.Usage{{Resource: "nvidia.com/gpu", Flavor: "f1", Admitted: qty(8), Reserved: qty(8)}}})
				if s.pick(4) == 0 {
					ev = events.Deleted(clock, events.KindClusterQueue, name)
				}
			}
		case 11:
			// Events the state must ignore: no payload, no key.
			ev = oneOf(s,
				events.Event{Time: clock, Kind: events.KindNode, Op: events.OpUpsert, Key: "n0"},
				events.Event{Time: clock, Kind: events.KindResourceSlice},
				events.Event{Time: clock, Kind: events.KindConfig, Config: &events.Config{MaxTreeDepth: -1}})
		case 12:
			ev = genDRA(s, clock)
		}
		ev.Seq = uint64(len(out) + 1)
		out = append(out, ev)
	}
	return out
}

// genDRA is a DRA event over a small name space: classes with selectors
// that accept, refuse, fail or do not compile; slices of pools that come
// and go, node-local or not, with counters; configurations with mappings.
func genDRA(s *source, clock time.Time) events.Event {
	classes := []string{"gpu.c", "mig.c", "x.c"}
	slices := []string{"s0", "s1", "s2", "s3"}
	switch s.pick(5) {
	case 0:
		c := &events.DeviceClass{Name: oneOf(s, classes...), ExtendedResourceName: oneOf(s, "", "", "nvidia.com/gpu", "example.com/x")}
		for range s.pick(3) {
			c.Selectors = append(c.Selectors, oneOf(s, "device.attributes['d1'].type == 'gpu'", "device.driver == 'd1'",
				"device.attributes['d1'].type == 'mig'", "device.driver ==", "true"))
		}
		return events.DeviceClassUpserted(clock, c)
	case 1:
		return events.Deleted(clock, oneOf(s, events.KindDeviceClass, events.KindResourceSlice), oneOf(s, append(classes, slices...)...))
	case 2:
		cfg := events.Config{HysteresisPercent: oneOf(s, 0, 10, 50), MaxTreeDepth: 5, MeasuredResources: []string{"nvidia.com/gpu"}}
		if s.flag() {
			cfg.DeviceClassMappings = append(cfg.DeviceClassMappings, events.DeviceClassMapping{Name: "nvidia.com/gpu", DeviceClassNames: []string{oneOf(s, classes...)}})
		}
		if s.flag() {
			m := events.DeviceClassMapping{Name: "gpu.memory", DeviceClassNames: []string{"gpu.c", "mig.c"},
				Sources: []events.MappingSource{{Type: events.SourceCounter, Counter: &events.CounterSource{Name: "memory", Driver: "d1"}}}}
			if s.flag() {
				m.Sources[0].Counter.DeviceSelector = &events.DeviceSelector{Type: events.SelectorCEL, CEL: &events.CELSelector{Expression: "device.attributes['d1'].type == 'gpu'"}}
			}
			cfg.DeviceClassMappings = append(cfg.DeviceClassMappings, m)
		}
		return events.ConfigChanged(clock, cfg)
	}
	sl := &events.ResourceSlice{Name: oneOf(s, slices...), Driver: oneOf(s, "d1", "d1", "d2"), Pool: oneOf(s, "n0", "n1", "net"),
		Generation: int64(1 + s.pick(2)), SliceCount: int64(1 + s.pick(2))}
	switch s.pick(4) {
	case 0:
		sl.Access.AllNodes = true
	case 1:
		sl.Access.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{oneOf(s, "f1", "f2")}}}}}}
	default:
		sl.Access.NodeName = oneOf(s, fuzzNodes...)
	}
	if s.pick(3) == 0 {
		for i := range 1 + s.pick(2) {
			sl.SharedCounters = append(sl.SharedCounters, resourcev1.CounterSet{Name: fmt.Sprintf("c%d", i),
				Counters: map[string]resourcev1.Counter{"memory": {Value: resource.MustParse(oneOf(s, "40Gi", "80Gi", "0"))}}})
		}
	} else {
		for i := range s.pick(4) {
			typ := oneOf(s, "gpu", "mig")
			d := events.Device{Name: fmt.Sprintf("dev%d", i), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: &typ}}}
			if s.flag() {
				d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: oneOf(s, "c0", "c1")}}
			}
			sl.Devices = append(sl.Devices, d)
		}
	}
	return events.ResourceSliceUpserted(clock, sl)
}

// checkSequence applies evs to a state, to a second state through the
// encoding, and from the middle on to a clone, checking the invariants
// after every event and that all three agree.
func checkSequence(evs []events.Event) error {
	a, b := New(), New()
	var c *State
	for i, ev := range evs {
		ta := a.Apply(ev)
		var tb []Transition
		if enc, err := events.Marshal(ev); err == nil {
			dec, err := events.Unmarshal(enc)
			if err != nil {
				return fmt.Errorf("event %s does not decode: %v", ev, err)
			}
			tb = b.Apply(dec)
		} else {
			tb = b.Apply(ev) // invalid: ignored by both
		}
		if fmt.Sprint(ta) != fmt.Sprint(tb) {
			return fmt.Errorf("after %s: transitions differ:\n%v\n%v", ev, ta, tb)
		}
		for _, tr := range ta {
			if tr.From == tr.To {
				return fmt.Errorf("after %s: a self-transition %s", ev, tr)
			}
		}
		if c != nil {
			if tc := c.Apply(ev); fmt.Sprint(ta) != fmt.Sprint(tc) {
				return fmt.Errorf("after %s: a clone's transitions differ:\n%v\n%v", ev, ta, tc)
			}
		}
		if i == len(evs)/2 {
			c = a.Clone()
		}
		if err := checkInvariants(a); err != nil {
			return fmt.Errorf("after %s: %v", ev, err)
		}
		if da, db := a.Dump(), b.Dump(); da != db {
			return fmt.Errorf("after %s: the same events give different states:\n%s", ev, lineDiff(da, db))
		}
	}
	if c != nil {
		if da, dc := a.Dump(), c.Dump(); da != dc {
			return fmt.Errorf("a clone that applied the same events differs:\n%s", lineDiff(da, dc))
		}
	}
	return nil
}

func describe(evs []events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		line, err := events.Marshal(ev)
		if err != nil {
			fmt.Fprintf(&b, "%s (invalid: %v)\n", ev, err)
			continue
		}
		fmt.Fprintf(&b, "%s\n", line)
	}
	return b.String()
}

// FuzzApply feeds random event sequences to the reducer: applying them twice
// gives identical states, the incremental capacity and tree equal a
// recount, no Ready node has a non-Ready ancestor, and nothing panics.
func FuzzApply(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
		[]byte("the guide's tree, more or less, in bytes"),
		{3, 3, 0, 0, 0, 0, 1, 1, 1, 8, 6, 0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 0, 1, 1, 3, 30, 8, 5, 1, 8, 9, 0, 0, 0, 0, 1, 1, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs := genEvents(data)
		if err := checkSequence(evs); err != nil {
			t.Fatalf("%v\nevents:\n%s", err, describe(evs))
		}
	})
}

// TestRandomSequences is FuzzApply's property over a fixed, seeded set of
// random sequences, so that every `go test` runs it.
func TestRandomSequences(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 10))
	runs, length := 120, 1200
	if testing.Short() {
		runs = 50
	}
	for run := range runs {
		data := make([]byte, rng.IntN(length))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		evs := genEvents(data)
		if err := checkSequence(evs); err != nil {
			t.Fatalf("run %d: %v\nevents:\n%s", run, err, describe(evs))
		}
	}
}
