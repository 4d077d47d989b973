package manager

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// BenchmarkScrape is one scrape of a manager whose state holds 10,000
// Kubernetes Nodes and 1,000 teams under 50 cohorts: the snapshot under
// the reducer's lock (snapshot) and the whole scrape (gather).
func BenchmarkScrape(b *testing.B) {
	m, err := New(DefaultOptions(), &rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	apply := func(ev events.Event) { m.st.Apply(ev) }
	apply(events.ConfigChanged(now, m.opts.EventsConfig()))
	apply(events.FlavorUpserted(now, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}))
	gpus := map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")}
	for i := range 10_000 {
		apply(events.NodeUpserted(now, &events.Node{Name: fmt.Sprintf("n%05d", i), Labels: map[string]string{"gpu": "a100"},
			Capacity: gpus, Allocatable: gpus, Ready: i%100 != 0}))
	}
	apply(events.Synced(now))
	root := aqtest.Root().Budget("nvidia.com/gpu", "a100", "80000").Obj()
	apply(events.QuotaUpserted(now, &events.Quota{Name: root.Name, Generation: 1, Spec: root.Spec}))
	for c := range 50 {
		co := aqtest.Cohort(fmt.Sprintf("cohort-%02d", c), "root").Budget("nvidia.com/gpu", "a100", "1600").Obj()
		apply(events.QuotaUpserted(now, &events.Quota{Name: co.Name, Generation: 1, Spec: co.Spec}))
		for t := range 20 {
			tm := aqtest.Team(fmt.Sprintf("team-%02d-%02d", c, t), co.Name).Budget("nvidia.com/gpu", "a100", "80").Obj()
			apply(events.QuotaUpserted(now, &events.Quota{Name: tm.Name, Generation: 1, Spec: tm.Spec}))
		}
	}
	if n := len(m.metricsSnapshot().Nodes); n != 1051 {
		b.Fatalf("%d tree nodes, want 1051", n)
	}
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.metricsSnapshot()
		}
	})
	b.Run("gather", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.metrics.Registry.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
