package store

import (
	"testing"

	"ome.io/quota-manager/events"
)

// BenchmarkAppend measures one append under each sync policy; the
// bytes/event metric is the log's size on disk per event.
func BenchmarkAppend(b *testing.B) {
	for _, p := range []SyncPolicy{SyncNever, SyncInterval, SyncAlways} {
		b.Run(string(p), func(b *testing.B) {
			dir := b.TempDir()
			l, err := Open(dir, Options{Sync: p, MaxBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			evs := make([]events.Event, 100)
			for i := range evs {
				evs[i] = sample(uint64(i + 1))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ev := evs[i%len(evs)]
				ev.Seq = uint64(i + 1)
				if err := l.Append(ev); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			var total int64
			segs, _ := listSegments(dir)
			for _, s := range segs {
				total += s.size
			}
			b.ReportMetric(float64(total)/float64(b.N), "bytes/event")
		})
	}
}

const benchEvents = 100_000

// BenchmarkRead compares reading a log through Read with bare decoding of
// the same records (checksums and events.Unmarshal, no bookkeeping); per
// event figures.
func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	write(b, dir, Options{Sync: SyncNever, MaxBytes: -1}, 1, benchEvents)
	b.Run("Read", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			n := 0
			if _, err := Read(dir, 0, func(events.Event) error { n++; return nil }); err != nil || n != benchEvents {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchEvents), "ns/event")
	})
	b.Run("BareDecode", func(b *testing.B) {
		segs, _ := listSegments(dir)
		for i := 0; i < b.N; i++ {
			n := 0
			for _, s := range segs {
				if _, err := scanSegment(s, func(p []byte, _ int64) error {
					if _, err := events.Unmarshal(p); err != nil {
						return err
					}
					n++
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			if n != benchEvents {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchEvents), "ns/event")
	})
}
