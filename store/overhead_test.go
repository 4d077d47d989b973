package store

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// overheadEvents are a busy cluster's inputs: Node status updates, budget
// changes and ClusterQueue usage, over a 50-team tree and 1,000 Nodes.
func overheadEvents(n int) []events.Event {
	var out []events.Event
	add := func(ev events.Event) { ev.Seq = uint64(len(out) + 1); out = append(out, ev) }
	add(events.ConfigChanged(t0, events.DefaultConfig()))
	add(events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}))
	add(events.QuotaUpserted(t0, &events.Quota{Name: "root", Spec: aqtest.Root().Obj().Spec}))
	for i := 0; i < 50; i++ {
		team := aqtest.Team(fmt.Sprintf("team-%d", i), "root").Budget("nvidia.com/gpu", "a100", "8").Obj()
		add(events.QuotaUpserted(t0, &events.Quota{Name: team.Name, Generation: 1, Spec: team.Spec}))
	}
	add(events.Tick(t0))
	for i := 0; len(out) < n; i++ {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		switch i % 10 {
		case 0:
			team := aqtest.Team(fmt.Sprintf("team-%d", i%50), "root").Budget("nvidia.com/gpu", "a100", fmt.Sprint(1+i%8)).Obj()
			add(events.QuotaUpserted(at, &events.Quota{Name: team.Name, Generation: int64(i), Spec: team.Spec}))
		case 1, 2, 3:
			add(events.QueueUpserted(at, &events.Queue{Name: fmt.Sprintf("team-%d", i%50), Managed: true, Usage: []events.Usage{{
				Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse(fmt.Sprint(i % 8))}}}))
		default:
			node := sample(uint64(i%9 + 1)).Node
			node.Name = fmt.Sprintf("gpu-node-%d", i%1000)
			node.Ready = i%7 != 0
			add(events.NodeUpserted(at, node))
		}
	}
	return out
}

// BenchmarkRecordOverhead measures the consumer loop of the manager: the
// reducer applying a busy cluster's events alone (ApplyOnly), and the same
// loop handing each event to the recorder first (RecordThenApply), timed
// until the last event is in the log (a sustained rate, not one that
// leaves a backlog behind), opening and closing the log untimed. The
// OneCore variants run with GOMAXPROCS=1: the recorder then takes its CPU
// from the consumer, the worst case. AppendThenApply appends on the
// consumer's own goroutine, for comparison. Compare ns/event within one
// run: figures of runs on a busy machine are not comparable.
func BenchmarkRecordOverhead(b *testing.B) {
	evs := overheadEvents(100_000)
	applyOnly := func(b *testing.B) {
		defer cpuPerEvent(b, len(evs))()
		for i := 0; i < b.N; i++ {
			st := state.New()
			for _, ev := range evs {
				st.Apply(ev)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
	}
	recordThenApply := func(b *testing.B) {
		var size int64
		defer cpuPerEvent(b, len(evs))()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dir := b.TempDir()
			l, err := Open(dir, Options{MaxBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			rec := NewRecorder(l, 4096, func(_ events.Event, err error) { b.Error(err) })
			st := state.New()
			b.StartTimer()
			for _, ev := range evs {
				rec.Record(ev)
				st.Apply(ev)
			}
			rec.Wait(evs[len(evs)-1].Seq)
			b.StopTimer()
			if err := rec.Close(); err != nil {
				b.Fatal(err)
			}
			size = logSize(b, dir)
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
		b.ReportMetric(float64(size)/float64(len(evs)), "bytes/event")
	}
	oneCore := func(f func(*testing.B)) func(*testing.B) {
		return func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			f(b)
		}
	}
	b.Run("ApplyOnly", applyOnly)
	b.Run("RecordThenApply", recordThenApply)
	b.Run("OneCore/ApplyOnly", oneCore(applyOnly))
	b.Run("OneCore/RecordThenApply", oneCore(recordThenApply))
	b.Run("AppendThenApply", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			l, err := Open(b.TempDir(), Options{MaxBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			st := state.New()
			b.StartTimer()
			for _, ev := range evs {
				if err := l.Append(ev); err != nil {
					b.Fatal(err)
				}
				st.Apply(ev)
			}
			b.StopTimer()
			l.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
	})
}

// cpuPerEvent reports the process's CPU time (user and system, every
// goroutine and the garbage collector) per event from now until the
// returned function runs: a figure that other processes on a busy machine
// disturb much less than the elapsed time. It includes the untimed parts.
func cpuPerEvent(b *testing.B, events int) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Nanoseconds())/float64(b.N*events), "cpu-ns/event")
	}
}

func logSize(b *testing.B, dir string) int64 {
	segs, err := listSegments(dir)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, s := range segs {
		total += s.size
	}
	return total
}
