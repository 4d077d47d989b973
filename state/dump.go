package state

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"ome.io/quota-manager/events"
)

// Dump renders the whole state as text, every map in sorted order, so that
// two states are the same exactly when their dumps are byte for byte. It is
// what replays compare, and it is meant for people too.
func (s *State) Dump() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	c := s.cfg
	w("seq %d synced=%t", s.lastSeq, s.synced)
	w("config maxTreeDepth=%d hysteresisPercent=%d reportInterval=%s measured=%s",
		c.MaxTreeDepth, c.HysteresisPercent, c.ReportInterval.Duration, strings.Join(c.MeasuredResources, ","))
	if len(c.DeviceClassMappings) > 0 {
		m, _ := json.Marshal(c.DeviceClassMappings)
		w("config deviceClassMappings=%s", m)
	}
	if c.Mode != "" {
		w("config mode=%s members=%s", c.Mode, strings.Join(c.Members, ","))
	}
	if s.leader != "" {
		w("leader %s", s.leader)
	}
	for _, mv := range s.Members() {
		w("member %s reachable=%t reported=%t message=%q flavors=%s", mv.Name, mv.Reachable, mv.Reported, mv.Message, strings.Join(mv.Flavors, ","))
		for _, e := range mv.Capacity {
			w("  capacity %s allocatable=%s mark=%s", e.Pair, e.Allocatable, e.HighWaterMark)
		}
	}
	for _, name := range sortedKeys(s.members) {
		m := s.members[name]
		spec, _ := json.Marshal(m.spec)
		w("quota %s gen=%d phase=%s frozenBy=%s/%s place=%s", name, m.gen, m.phase, m.frozenBy, m.frozenAs, placeString(m.place))
		w("  spec %s", spec)
		w("  message %s", m.message)
		for _, v := range m.viols {
			w("  violation %s", v)
		}
		for _, sp := range m.splits {
			var parts []string
			for _, sh := range sp.Shares {
				parts = append(parts, sh.Cluster+"="+sh.Amount.String())
			}
			w("  split %s %s: %s", sp.Pair, sp.Policy, strings.Join(parts, ","))
		}
		if o := m.outcome; o.Kind != events.OutcomeNone {
			w("  outcome %s", strings.TrimSuffix(string(o.Kind)+": "+o.Message, ": "))
		}
	}
	for _, p := range sortedKeys(s.kids) {
		w("kids %s: %s", p, strings.Join(s.kids[p], ","))
	}
	for _, p := range sortedKeys(s.sums) {
		w("sums %s: %s", p, pairAmounts(s.sums[p]))
	}
	for _, p := range slices.SortedFunc(maps.Keys(s.byPair), Pair.Compare) {
		w("budgets on %s: %s", p, strings.Join(sortedKeys(s.byPair[p]), ","))
	}
	for _, f := range sortedKeys(s.byFlavor) {
		w("budgets on flavor %s: %s", f, strings.Join(sortedKeys(s.byFlavor[f]), ","))
	}
	for _, f := range sortedKeys(s.flavors) {
		w("flavor %s %s", f, labelString(s.flavors[f]))
	}
	for _, name := range sortedKeys(s.hosts) {
		m := s.hosts[name]
		w("node %s ready=%t unschedulable=%t flavors=%s labels=%s capacity=%s allocatable=%s", name, m.rec.Ready, m.rec.Unschedulable,
			strings.Join(m.flavors, ","), labelString(m.rec.Labels), amountString(amounts(m.rec.Capacity)), amountString(amounts(m.rec.Allocatable)))
	}
	for _, p := range slices.SortedFunc(maps.Keys(s.tallies), Pair.Compare) {
		t := s.tallies[p]
		w("tally %s installed=%s allocatable=%s carriers=%d", p, t.installed, t.allocatable, t.carriers)
	}
	w("unattributed %s nodes=%s", amountString(s.unattributed), strings.Join(sortedKeys(s.strays), ","))
	s.dumpDRA(w)
	for _, e := range s.Capacity() {
		w("entry %s allocatable=%s mark=%s observedAt=%s", e.Pair, e.Allocatable, e.HighWaterMark, stamp(e.ObservedAt))
	}
	w("root seen=%t", s.rootSeen)
	for _, r := range s.reported {
		w("  reported %s@%s allocatable=%s mark=%s observedAt=%s", r.ResourceName, r.ResourceFlavor,
			r.Allocatable.String(), r.HighWaterMark.String(), stamp(r.ObservedAt.Time))
	}
	if !s.failedAt.IsZero() || s.failure != "" {
		w("measure failed at %s: %s", stamp(s.failedAt), s.failure)
	}
	for _, src := range sortedKeys(s.failing) {
		w("failing %s: %s", src, s.failing[src])
	}
	for _, q := range sortedKeys(s.usage) {
		for _, u := range s.usage[q] {
			w("usage %s %s@%s admitted=%s reserved=%s borrowed=%s", q, u.Resource, u.Flavor,
				u.Admitted.String(), u.Reserved.String(), u.Borrowed.String())
		}
	}
	return b.String()
}

func placeString(p Place) string {
	switch p.Reason {
	case "":
		return fmt.Sprintf("depth %d", p.Depth)
	case ReasonParentMissing:
		return fmt.Sprintf("ParentMissing(%s)", p.Parent)
	case ReasonParentCycle:
		return fmt.Sprintf("ParentCycle(%s)", strings.Join(p.Cycle, ","))
	}
	return fmt.Sprintf("Unreachable(%s %s)", p.Via, p.ViaReason)
}

func pairAmounts[V fmt.Stringer](m map[Pair]V) string {
	var parts []string
	for _, p := range slices.SortedFunc(maps.Keys(m), Pair.Compare) {
		parts = append(parts, fmt.Sprintf("%s=%s", p, m[p]))
	}
	return strings.Join(parts, ",")
}

func labelString(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func amountString(m map[string]Amount) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k].String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// stamp formats a time in UTC, or "-" for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
