package events

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
)

// The hand-written encoding is encoding/json's, byte for byte: on every
// kind of the samples, and on random Nodes and ClusterQueues with names
// that need escaping.
func TestAppendMarshalEqualsJSON(t *testing.T) {
	evs := sampleEvents()
	r := rand.New(rand.NewPCG(1, 2))
	odd := []string{"a", "gpu.product", `quo"te`, "back\\slash", "<html>&", "tab\there", "ünïcode", "\u2028line", "bad\xffutf8", ""}
	pick := func() string { return odd[r.IntN(len(odd))] + fmt.Sprint(r.IntN(3)) }
	amounts := []string{"0", "8", "500m", "1Ti", "1.5", "1e3", "40Gi", "123456789", "1500", "1.5k", "-7", "2000", "-3000", "1001k", "1025", "999999999999999999", "12345678901234567890", "1500m", "8000m"}
	qty := func() resource.Quantity { return resource.MustParse(amounts[r.IntN(len(amounts))]) }
	for i := 0; i < 500; i++ {
		at := time.Date(2026, 11, 30, 3, 0, 0, r.IntN(2e9), time.FixedZone("X", 3600*r.IntN(3)))
		switch i % 3 {
		case 2:
			spec := v1beta1.AcceleratorQuotaSpec{Role: v1beta1.Role(pick())}
			if r.IntN(2) == 0 {
				spec.ParentRef = &v1beta1.ParentReference{Name: pick()}
			}
			for j := r.IntN(3); j > 0; j-- {
				b := v1beta1.Budget{ResourceName: pick(), ResourceFlavor: pick(), Nominal: qty()}
				if r.IntN(2) == 0 {
					b.BorrowingLimit = ptr(qty())
				}
				if r.IntN(2) == 0 {
					b.LendingLimit = ptr(qty())
				}
				if r.IntN(5) == 0 {
					b.PerCluster = []v1beta1.ClusterShare{{Cluster: pick(), Nominal: qty()}}
				}
				spec.Budgets = append(spec.Budgets, b)
			}
			if r.IntN(3) == 0 {
				spec.PriorityTier = ptr(int32(r.IntN(5) - 2))
			}
			if r.IntN(5) == 0 {
				spec.Distribution = &v1beta1.Distribution{Policy: []v1beta1.DistributionPolicy{"", v1beta1.DistributionExplicit, v1beta1.DistributionProportional}[r.IntN(3)]}
			}
			if r.IntN(6) == 0 {
				spec.GoneClusters = []v1beta1.GoneCluster{{Name: pick(), Force: r.IntN(2) == 0}}
			}
			name := pick()
			q := &Quota{Name: name, Generation: int64(r.IntN(3)), Spec: spec, Deleting: r.IntN(4) == 0, Guarded: r.IntN(3) == 0}
			if r.IntN(2) == 0 {
				q.Record = pick()
			}
			if r.IntN(4) == 0 {
				q.Holds = &v1beta1.FleetHolds{Writer: pick(), Clusters: []v1beta1.ClusterHolds{{Cluster: pick(),
					Budgets: []v1beta1.HeldBudget{{ResourceName: pick(), ResourceFlavor: pick(), Nominal: qty(), BorrowingLimit: qty()}}}}}
			}
			evs = append(evs, QuotaUpserted(at, q))
		case 0:
			n := &Node{Name: pick(), Ready: r.IntN(2) == 0, Unschedulable: r.IntN(2) == 0}
			if r.IntN(3) > 0 {
				n.Labels = map[string]string{pick(): pick(), pick(): pick()}
			}
			if r.IntN(3) > 0 {
				n.Capacity = quantities(r, pick, qty)
				n.Allocatable = quantities(r, pick, qty)
			}
			evs = append(evs, NodeUpserted(at, n))
		case 1:
			q := &Queue{Name: pick(), Managed: r.IntN(2) == 0}
			for j := r.IntN(3); j > 0; j-- {
				q.Usage = append(q.Usage, Usage{Resource: pick(), Flavor: pick(), Admitted: qty(), Reserved: qty(), Borrowed: qty()})
			}
			evs = append(evs, QueueUpserted(at, q))
		}
		evs[len(evs)-1].Seq = uint64(r.Uint32())
	}
	evs = append(evs, MeasureFailed(t0, `nodes is forbidden: "x" <y>`), Synced(t0), Tick(t0.In(time.FixedZone("Y", -7200))))
	for _, ev := range evs {
		fast, err := AppendMarshal([]byte("prefix"), ev)
		if err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		slow, err := marshalWire(ev)
		if err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		if !bytes.Equal(fast[len("prefix"):], slow) {
			t.Errorf("%s:\nhand-written %s\njson         %s", ev, fast[len("prefix"):], slow)
		}
	}
}

func quantities(r *rand.Rand, pick func() string, qty func() resource.Quantity) map[string]resource.Quantity {
	m := map[string]resource.Quantity{}
	for j := r.IntN(4); j > 0; j-- {
		m[pick()] = qty()
	}
	return m
}

// BenchmarkMarshal compares the hand-written encoding with encoding/json's
// on a Node update, the busiest event.
func BenchmarkMarshal(b *testing.B) {
	ev := sampleEvents()[2]
	b.Run("AppendMarshal", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			buf, _ = AppendMarshal(buf[:0], ev)
		}
		b.ReportMetric(float64(len(buf)), "bytes/event")
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = marshalWire(ev)
		}
	})
}
