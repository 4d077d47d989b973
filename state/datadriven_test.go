package state

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// TestScripts runs the scripts in testdata: run with -rewrite to regenerate
// the expected output, then read the diff: the scripts are the spec.
//
// Directives:
//
//	apply           one event per input line (see parseEvent), or
//	                "advance 30s" / "at 2026-10-05T09:41:12Z" to move the clock;
//	                prints each event and the transitions it causes
//	tree            every node, its place and phase, with the message
//	status NAME     NAME's Ready and Degraded conditions, as the guide prints them
//	capacity        root's capacity as the guide prints it: resource flavor
//	                allocatable highWaterMark; "verbose" adds installed,
//	                measured and observedAt
//	observed        resource flavor observedAt, as the guide prints it
//	unattributed    capacity on nodes matching no flavor
//	dra             unbudgeted devices by DeviceClass, unattributed DRA
//	                capacity, and what keeps devices from counting
//	usage NAME      a team's ClusterQueue usage
//	check LINE      the violations a write of the aq (or "delete aq NAME") in
//	                LINE would add, as the webhook sees them
//	writeback       root's status written as the state has it (the applier)
//	restart         a new quota manager: a fresh state and log, same clock
//	dump            the whole state
//
// After every directive the state is checked against a recount, a replay
// of its log through the encoding, a clone, and the rule book from scratch.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{s: New(), clock: time.Date(2026, 10, 5, 9, 40, 0, 0, time.UTC), cfg: events.DefaultConfig()}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := h.run(t, d)
			if err := checkInvariants(h.s); err != nil {
				t.Fatalf("%s: after %q: %v", d.Pos, d.Cmd, err)
			}
			if err := replayCheck(h.s, h.log); err != nil {
				t.Fatalf("%s: after %q: %v", d.Pos, d.Cmd, err)
			}
			return out
		})
	})
}

type harness struct {
	s     *State
	log   []events.Event
	clock time.Time
	cfg   events.Config
}

func (h *harness) apply(ev events.Event) []Transition {
	ev.Seq = uint64(len(h.log) + 1)
	ev.Time = h.clock
	h.log = append(h.log, ev)
	return h.s.Apply(ev)
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	switch d.Cmd {
	case "apply":
		for _, line := range strings.Split(d.Input, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 0 || strings.HasPrefix(f[0], "#"):
				continue
			case f[0] == "advance" && len(f) == 2:
				dur, err := time.ParseDuration(f[1])
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				h.clock = h.clock.Add(dur)
				continue
			case f[0] == "at" && len(f) == 2:
				at, err := time.Parse(time.RFC3339, f[1])
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				h.clock = at
				continue
			}
			ev, err := h.parseEvent(f)
			if err != nil {
				d.Fatalf(t, "%q: %v", line, err)
			}
			trs := h.apply(ev)
			fmt.Fprintln(&b, h.log[len(h.log)-1])
			for _, tr := range trs {
				fmt.Fprintf(&b, "  %s\n", tr)
			}
		}
	case "tree":
		for _, n := range h.s.Nodes() {
			where := fmt.Sprintf("depth %d", n.Depth)
			if n.Parent != "" {
				where = "parent " + n.Parent + ", " + where
			}
			fmt.Fprintf(&b, "%s (%s, %s) %s", n.Name, n.Spec.Role, where, n.Phase)
			if n.Phase != PhaseReady {
				fmt.Fprintf(&b, ": %s", n.Message)
			}
			b.WriteString("\n")
		}
	case "status":
		st, ok := h.s.NodeStatus(d.CmdArgs[0].Key)
		if !ok {
			return "no such node\n"
		}
		ready, degraded := "False", "True"
		if st.Ready() {
			ready, degraded = "True", "False"
		}
		fmt.Fprintf(&b, "Ready=%s %s: %s\nDegraded=%s %s: %s\n", ready, st.Reason, st.Message, degraded, st.Reason, st.DegradedMessage())
	case "capacity":
		verbose := d.HasArg("verbose")
		for _, e := range h.s.Capacity() {
			fmt.Fprintf(&b, "%s %s %s %s", e.Resource, e.Flavor, e.Allocatable, e.HighWaterMark)
			if verbose {
				fmt.Fprintf(&b, " installed=%s measured=%t observedAt=%s", e.Installed, e.Measured, stamp(e.ObservedAt))
			}
			b.WriteString("\n")
		}
		switch {
		case !h.s.Synced():
			b.WriteString("root status: not measured yet\n")
		case h.s.CapacityNeedsWrite():
			b.WriteString("root status: needs write\n")
		default:
			b.WriteString("root status: up to date\n")
		}
	case "observed":
		for _, e := range h.s.Capacity() {
			fmt.Fprintf(&b, "%s %s %s\n", e.Resource, e.Flavor, stamp(e.ObservedAt))
		}
	case "unavailable":
		for _, e := range h.s.Capacity() {
			if e.Unavailable > 0 {
				fmt.Fprintf(&b, "%s %s unavailable=%s installed=%s allocatable=%s\n", e.Resource, e.Flavor, e.Unavailable, e.Installed, e.Allocatable)
			}
		}
	case "unattributed":
		for _, u := range h.s.Unattributed() {
			fmt.Fprintf(&b, "%s node=%s %s=%s\n", u.Reason, u.Node, u.Resource, u.Amount)
		}
		for _, u := range h.s.UnattributedTotals() {
			fmt.Fprintf(&b, "total %s=%s\n", u.Resource, u.Amount)
		}
	case "dra":
		for _, u := range h.s.Unbudgeted() {
			fmt.Fprintf(&b, "unbudgeted %s devices=%d\n", u.DeviceClass, u.Devices)
		}
		for _, u := range h.s.UnattributedDRA() {
			fmt.Fprintf(&b, "unattributed %s %s=%s\n", u.Node, u.Resource, u.Amount)
		}
		for _, p := range h.s.DRAProblems() {
			fmt.Fprintf(&b, "problem %s\n", p)
		}
	case "usage":
		for _, u := range h.s.Usage(d.CmdArgs[0].Key) {
			fmt.Fprintf(&b, "%s@%s admitted=%s reserved=%s borrowed=%s\n", u.Resource, u.Flavor, u.Admitted.String(), u.Reserved.String(), u.Borrowed.String())
		}
	case "check":
		f := strings.Fields(d.Input)
		var before, after []Violation
		switch {
		case len(f) == 3 && f[0] == "delete" && f[1] == "aq":
			before, after = h.s.WhatIf(f[2], nil)
		default:
			ev, err := h.parseEvent(f)
			if err != nil || ev.Kind != events.KindAcceleratorQuota {
				d.Fatalf(t, "check takes an aq line or delete aq NAME: %v", err)
			}
			before, after = h.s.WhatIf(ev.Key, &ev.Quota.Spec)
		}
		added := Diff(before, after)
		if len(added) == 0 {
			b.WriteString("no new violation\n")
		}
		for _, v := range added {
			fmt.Fprintf(&b, "%s\n", v)
		}
	case "writeback":
		root, ok := h.s.Node(v1beta1.RootName)
		if !ok {
			d.Fatalf(t, "no root to write back to")
		}
		trs := h.apply(events.QuotaUpserted(h.clock, &events.Quota{
			Name: root.Name, Generation: root.Generation, Spec: *root.Spec, Capacity: h.s.CapacityStatus(),
		}))
		fmt.Fprintln(&b, h.log[len(h.log)-1])
		for _, tr := range trs {
			fmt.Fprintf(&b, "  %s\n", tr)
		}
	case "restart":
		// A new quota manager: a fresh state and a fresh log, same clock.
		h.s, h.log, h.cfg = New(), nil, events.DefaultConfig()
	case "dump":
		b.WriteString(h.s.Dump())
	default:
		d.Fatalf(t, "unknown directive %q", d.Cmd)
	}
	if b.Len() == 0 {
		return "ok\n"
	}
	return b.String()
}

// parseEvent reads one event line:
//
//	config [max-depth=N] [hysteresis=N] [report-interval=D] [resources=a,b]
//	flavor NAME [LABEL=VALUE ...]
//	node NAME [label=K=V ...] [cap=RESOURCE=Q ...] [alloc=RESOURCE=Q ...] [notready] [cordoned]
//	     (alloc defaults to cap, resource by resource)
//	aq NAME role=ROLE [parent=P] [budget=RES:FLAVOR:NOMINAL[:borrow=Q][:lend=Q] ...]
//	     [priority-tier=N] [gen=N] [status=RES:FLAVOR:ALLOC:MARK[@TIME] ...]
//	cq NAME [unmanaged] [usage=RES:FLAVOR:ADMITTED:RESERVED:BORROWED ...]
//	class NAME [ext=RESOURCE] [sel=CEL ...]   (a CEL expression without spaces)
//	slice NAME driver=D pool=P [gen=N] [count=N] node=NODE|all-nodes|selector=K=V,...|per-device
//	     [dev=NAME[,ATTR=VALUE...][,uses=SET/COUNTER=Q...][,node=NODE] ...] [set=SET/COUNTER=Q[/COUNTER=Q...] ...]
//	     (attribute values read as int, bool or string)
//	config mapping=NAME=CLASS,CLASS[;counter=COUNTER;driver=D[;cel=CEL]]   (repeatable; mappings=none clears)
//	delete aq|node|flavor|cq|class|slice NAME
//	fail [source=SOURCE] REASON...
//	recover SOURCE
//	synced
//	tick
//	fail REASON...
func (h *harness) parseEvent(f []string) (events.Event, error) {
	now := h.clock
	kv := func(arg string) (string, string) {
		k, v, _ := strings.Cut(arg, "=")
		return k, v
	}
	switch f[0] {
	case "synced":
		return events.Synced(now), nil
	case "tick":
		return events.Tick(now), nil
	case "fail":
		if len(f) > 1 && strings.HasPrefix(f[1], "source=") {
			return events.SourceFailed(now, strings.TrimPrefix(f[1], "source="), strings.Join(f[2:], " ")), nil
		}
		return events.MeasureFailed(now, strings.Join(f[1:], " ")), nil
	case "recover":
		return events.SourceRecovered(now, f[1]), nil
	case "config":
		for _, arg := range f[1:] {
			k, v := kv(arg)
			var err error
			switch k {
			case "max-depth":
				h.cfg.MaxTreeDepth, err = strconv.Atoi(v)
			case "hysteresis":
				h.cfg.HysteresisPercent, err = strconv.Atoi(v)
			case "report-interval":
				h.cfg.ReportInterval.Duration, err = time.ParseDuration(v)
			case "resources":
				h.cfg.MeasuredResources = strings.Split(v, ",")
			case "mappings":
				h.cfg.DeviceClassMappings = nil
			case "mapping":
				m, err := parseMapping(v)
				if err != nil {
					return events.Event{}, err
				}
				h.cfg.DeviceClassMappings = append(h.cfg.DeviceClassMappings, m)
			default:
				err = fmt.Errorf("unknown config %q", k)
			}
			if err != nil {
				return events.Event{}, err
			}
		}
		return events.ConfigChanged(now, h.cfg), nil
	case "delete":
		if len(f) != 3 {
			return events.Event{}, fmt.Errorf("delete KIND NAME")
		}
		kind := map[string]events.Kind{"aq": events.KindAcceleratorQuota, "node": events.KindNode, "flavor": events.KindResourceFlavor, "cq": events.KindClusterQueue,
			"class": events.KindDeviceClass, "slice": events.KindResourceSlice}[f[1]]
		if kind == "" {
			return events.Event{}, fmt.Errorf("unknown kind %q", f[1])
		}
		return events.Deleted(now, kind, f[2]), nil
	case "flavor":
		fl := &events.Flavor{Name: f[1]}
		for _, arg := range f[2:] {
			if fl.NodeLabels == nil {
				fl.NodeLabels = map[string]string{}
			}
			k, v := kv(arg)
			fl.NodeLabels[k] = v
		}
		return events.FlavorUpserted(now, fl), nil
	case "node":
		n := &events.Node{Name: f[1], Ready: true, Labels: map[string]string{}, Capacity: map[string]resource.Quantity{}, Allocatable: map[string]resource.Quantity{}}
		explicit := map[string]bool{}
		for _, arg := range f[2:] {
			k, v := kv(arg)
			switch k {
			case "notready":
				n.Ready = false
			case "cordoned":
				n.Unschedulable = true
			case "label":
				lk, lv := kv(v)
				n.Labels[lk] = lv
			case "cap", "alloc":
				r, q := kv(v)
				qty, err := resource.ParseQuantity(q)
				if err != nil {
					return events.Event{}, err
				}
				if k == "cap" {
					n.Capacity[r] = qty
					if !explicit[r] {
						n.Allocatable[r] = qty
					}
				} else {
					n.Allocatable[r] = qty
					explicit[r] = true
				}
			default:
				return events.Event{}, fmt.Errorf("unknown node argument %q", arg)
			}
		}
		return events.NodeUpserted(now, n), nil
	case "aq":
		q := &events.Quota{Name: f[1], Generation: 1}
		for _, arg := range f[2:] {
			k, v := kv(arg)
			switch k {
			case "role":
				q.Spec.Role = v1beta1.Role(v)
			case "parent":
				q.Spec.ParentRef = &v1beta1.ParentReference{Name: v}
			case "gen":
				g, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return events.Event{}, err
				}
				q.Generation = g
			case "priority-tier":
				p, err := strconv.Atoi(v)
				if err != nil {
					return events.Event{}, err
				}
				tier := int32(p)
				q.Spec.PriorityTier = &tier
			case "budget":
				parts := strings.Split(v, ":")
				if len(parts) < 3 {
					return events.Event{}, fmt.Errorf("budget=RES:FLAVOR:NOMINAL[:borrow=Q][:lend=Q], got %q", v)
				}
				b := v1beta1.Budget{ResourceName: parts[0], ResourceFlavor: parts[1], Nominal: resource.MustParse(parts[2])}
				for _, extra := range parts[3:] {
					ek, ev := kv(extra)
					qty := resource.MustParse(ev)
					switch ek {
					case "borrow":
						b.BorrowingLimit = &qty
					case "lend":
						b.LendingLimit = &qty
					default:
						return events.Event{}, fmt.Errorf("unknown budget amount %q", ek)
					}
				}
				q.Spec.Budgets = append(q.Spec.Budgets, b)
			case "status":
				fig, at, _ := strings.Cut(v, "@")
				parts := strings.Split(fig, ":")
				if len(parts) != 4 {
					return events.Event{}, fmt.Errorf("status=RES:FLAVOR:ALLOC:MARK[@TIME], got %q", v)
				}
				c := v1beta1.CapacityStatus{ResourceName: parts[0], ResourceFlavor: parts[1],
					Allocatable: resource.MustParse(parts[2]), HighWaterMark: resource.MustParse(parts[3])}
				if at != "" {
					ts, err := time.Parse(time.RFC3339, at)
					if err != nil {
						return events.Event{}, err
					}
					c.ObservedAt = metav1.NewTime(ts)
				}
				q.Capacity = append(q.Capacity, c)
			default:
				return events.Event{}, fmt.Errorf("unknown aq argument %q", arg)
			}
		}
		return events.QuotaUpserted(now, q), nil
	case "class":
		c := &events.DeviceClass{Name: f[1]}
		for _, arg := range f[2:] {
			k, v := kv(arg)
			switch k {
			case "ext":
				c.ExtendedResourceName = v
			case "sel":
				c.Selectors = append(c.Selectors, v)
			default:
				return events.Event{}, fmt.Errorf("unknown class argument %q", arg)
			}
		}
		return events.DeviceClassUpserted(now, c), nil
	case "slice":
		sl, err := parseSlice(f)
		if err != nil {
			return events.Event{}, err
		}
		return events.ResourceSliceUpserted(now, sl), nil
	case "cq":
		q := &events.Queue{Name: f[1], Managed: true}
		for _, arg := range f[2:] {
			k, v := kv(arg)
			switch k {
			case "unmanaged":
				q.Managed = false
			case "usage":
				parts := strings.Split(v, ":")
				if len(parts) != 5 {
					return events.Event{}, fmt.Errorf("usage=RES:FLAVOR:ADMITTED:RESERVED:BORROWED, got %q", v)
				}
				q.Usage = append(q.Usage, events.Usage{Resource: parts[0], Flavor: parts[1],
					Admitted: resource.MustParse(parts[2]), Reserved: resource.MustParse(parts[3]), Borrowed: resource.MustParse(parts[4])})
			default:
				return events.Event{}, fmt.Errorf("unknown cq argument %q", arg)
			}
		}
		return events.QueueUpserted(now, q), nil
	}
	return events.Event{}, fmt.Errorf("unknown event %q", f[0])
}

// parseMapping reads NAME=CLASS,CLASS[;counter=COUNTER;driver=D[;cel=CEL]].
func parseMapping(v string) (events.DeviceClassMapping, error) {
	parts := strings.Split(v, ";")
	name, classes, ok := strings.Cut(parts[0], "=")
	if !ok {
		return events.DeviceClassMapping{}, fmt.Errorf("mapping=NAME=CLASS,...[;counter=C;driver=D[;cel=E]], got %q", v)
	}
	m := events.DeviceClassMapping{Name: name, DeviceClassNames: strings.Split(classes, ",")}
	if len(parts) > 1 {
		c := &events.CounterSource{}
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(p, "=")
			switch k {
			case "counter":
				c.Name = val
			case "driver":
				c.Driver = val
			case "cel":
				c.DeviceSelector = &events.DeviceSelector{Type: events.SelectorCEL, CEL: &events.CELSelector{Expression: val}}
			default:
				return m, fmt.Errorf("unknown mapping part %q", p)
			}
		}
		m.Sources = []events.MappingSource{{Type: events.SourceCounter, Counter: c}}
	}
	return m, nil
}

func attribute(v string) resourcev1.DeviceAttribute {
	if i, err := strconv.ParseInt(v, 10, 64); err == nil {
		return resourcev1.DeviceAttribute{IntValue: &i}
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return resourcev1.DeviceAttribute{BoolValue: &b}
	}
	return resourcev1.DeviceAttribute{StringValue: &v}
}

// counters reads COUNTER=Q[/COUNTER=Q...].
func counters(v string) (map[string]resourcev1.Counter, error) {
	out := map[string]resourcev1.Counter{}
	for _, c := range strings.Split(v, "/") {
		k, q, ok := strings.Cut(c, "=")
		if !ok {
			return nil, fmt.Errorf("counter COUNTER=Q, got %q", c)
		}
		qty, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, err
		}
		out[k] = resourcev1.Counter{Value: qty}
	}
	return out, nil
}

func parseSlice(f []string) (*events.ResourceSlice, error) {
	sl := &events.ResourceSlice{Name: f[1], Generation: 1, SliceCount: 1}
	for _, arg := range f[2:] {
		k, v, _ := strings.Cut(arg, "=")
		var err error
		switch k {
		case "driver":
			sl.Driver = v
		case "pool":
			sl.Pool = v
		case "gen":
			sl.Generation, err = strconv.ParseInt(v, 10, 64)
		case "count":
			sl.SliceCount, err = strconv.ParseInt(v, 10, 64)
		case "node":
			sl.Access.NodeName = v
		case "all-nodes":
			sl.Access.AllNodes = true
		case "per-device":
			sl.Access.PerDevice = true
		case "selector":
			term := corev1.NodeSelectorTerm{}
			for _, l := range strings.Split(v, ",") {
				lk, lv, _ := strings.Cut(l, "=")
				term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: lk, Operator: corev1.NodeSelectorOpIn, Values: []string{lv}})
			}
			if sl.Access.NodeSelector == nil {
				sl.Access.NodeSelector = &corev1.NodeSelector{}
			}
			sl.Access.NodeSelector.NodeSelectorTerms = append(sl.Access.NodeSelector.NodeSelectorTerms, term)
		case "dev":
			parts := strings.Split(v, ",")
			d := events.Device{Name: parts[0]}
			for _, p := range parts[1:] {
				pk, pv, _ := strings.Cut(p, "=")
				switch pk {
				case "uses":
					set, rest, _ := strings.Cut(pv, "/")
					cs, cerr := counters(rest)
					if cerr != nil {
						return nil, cerr
					}
					d.ConsumesCounters = append(d.ConsumesCounters, resourcev1.DeviceCounterConsumption{CounterSet: set, Counters: cs})
				case "node":
					d.Access = &events.Access{NodeName: pv}
				default:
					if d.Attributes == nil {
						d.Attributes = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
					}
					d.Attributes[resourcev1.QualifiedName(pk)] = attribute(pv)
				}
			}
			sl.Devices = append(sl.Devices, d)
		case "set":
			name, rest, _ := strings.Cut(v, "/")
			cs, cerr := counters(rest)
			if cerr != nil {
				return nil, cerr
			}
			sl.SharedCounters = append(sl.SharedCounters, resourcev1.CounterSet{Name: name, Counters: cs})
		default:
			return nil, fmt.Errorf("unknown slice argument %q", arg)
		}
		if err != nil {
			return nil, err
		}
	}
	return sl, nil
}
