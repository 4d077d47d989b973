package state

import (
	"fmt"
	"testing"
	"time"

	"ome.io/quota-manager/events"
)

// The compiled selectors are kept per state, and only while a DeviceClass
// holds them: a class whose selector changes again and again, or classes
// that come and go, leave no compiled program behind.
func TestSelectorMemoHoldsWhatIsInUse(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	s := New()
	seq := uint64(0)
	apply := func(ev events.Event) {
		seq++
		ev.Seq = seq
		s.Apply(ev)
	}
	apply(events.Synced(t0))
	shared := `device.driver == "gpu.example.com"`
	for i := range 100 {
		apply(events.DeviceClassUpserted(t0, &events.DeviceClass{Name: "changing",
			Selectors: []string{fmt.Sprintf(`device.attributes["gpu.example.com"].index == %d`, i)}}))
		apply(events.DeviceClassUpserted(t0, &events.DeviceClass{Name: fmt.Sprintf("same-%d", i%3), Selectors: []string{shared}}))
	}
	if n := len(s.dra.selectors); n != 2 {
		t.Errorf("after 100 changes of one class's selector, the memo holds %d programs, want 2 (the current one, and the one three classes share)", n)
	}
	if a, b := s.dra.classes["same-0"].sels[0], s.dra.classes["same-2"].sels[0]; a != b {
		t.Error("two classes with the same selector hold two compiled programs")
	}
	apply(events.DeviceClassUpserted(t0, &events.DeviceClass{Name: "broken", Selectors: []string{"device.("}}))
	if c := s.dra.classes["broken"]; c == nil || c.err == "" {
		t.Fatalf("a selector that does not compile: class %+v, want its error", c)
	}
	for _, name := range []string{"changing", "same-0", "same-1", "same-2", "broken"} {
		apply(events.Deleted(t0, events.KindDeviceClass, name))
	}
	if n := len(s.dra.selectors); n != 0 {
		t.Errorf("with every DeviceClass deleted, the memo holds %d programs, want none", n)
	}
}
