package replay

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
)

// benchLog writes n events of a busy cluster (1,000 GPU Nodes changing
// readiness, 50 teams whose budgets and usage change, a tick a second) to
// a log in dir.
func benchLog(b *testing.B, dir string, n int) {
	l, err := store.Open(dir, store.Options{Sync: store.SyncNever, MaxBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	seq := uint64(0)
	add := func(ev events.Event) {
		seq++
		ev.Seq = seq
		if err := l.Append(ev); err != nil {
			b.Fatal(err)
		}
	}
	add(events.ConfigChanged(t0, events.DefaultConfig()))
	add(events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}))
	add(events.QuotaUpserted(t0, quota(aqtest.Root().Obj())))
	add(events.QuotaUpserted(t0, quota(aqtest.Cohort("ml", "root").Budget("nvidia.com/gpu", "a100", "4000").Obj())))
	for i := 0; int(seq) < n; i++ {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		switch {
		case i%1000 == 0:
			add(events.Tick(at))
		case i%10 == 0:
			q := quota(aqtest.Team(fmt.Sprintf("team-%d", i%50), "ml").Budget("nvidia.com/gpu", "a100", fmt.Sprint(8+i%8)).Obj())
			q.Generation = int64(i)
			add(events.QuotaUpserted(at, q))
		case i%10 < 4:
			add(events.QueueUpserted(at, &events.Queue{Name: fmt.Sprintf("team-%d", i%50), Managed: true, Usage: []events.Usage{{
				Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse(fmt.Sprint(i % 8))}}}))
		default:
			node := eightGPUNode(fmt.Sprintf("gpu-node-%d", i%1000))
			node.Ready = i%7 != 0
			add(events.NodeUpserted(at, node))
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReplay replays a log of a million events and compares it with
// reading and decoding the same log alone (ns/event each): the reducer,
// the timeline and the capacity history on top of decoding.
func BenchmarkReplay(b *testing.B) {
	n := benchEvents
	dir := b.TempDir()
	benchLog(b, dir, n)
	b.Run("Decode", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			count := 0
			if _, err := store.Read(dir, 0, func(events.Event) error { count++; return nil }); err != nil || count != n {
				b.Fatal(count, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
	b.Run("Replay", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, err := Run(dir, Options{})
			if err != nil || r.Events != n {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
}

// benchEvents is the size of BenchmarkReplay's log: a million, or
// REPLAY_BENCH_EVENTS.
var benchEvents = func() int {
	if v, err := strconv.Atoi(os.Getenv("REPLAY_BENCH_EVENTS")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}()
