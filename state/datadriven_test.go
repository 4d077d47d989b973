package state

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
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
	case "unattributed":
		for _, u := range h.s.Unattributed() {
			fmt.Fprintf(&b, "NoMatchingFlavor node=%s %s=%s\n", u.Node, u.Resource, u.Amount)
		}
		for _, u := range h.s.UnattributedTotals() {
			fmt.Fprintf(&b, "total %s=%s\n", u.Resource, u.Amount)
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
//	delete aq|node|flavor|cq NAME
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
		return events.MeasureFailed(now, strings.Join(f[1:], " ")), nil
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
		kind := map[string]events.Kind{"aq": events.KindAcceleratorQuota, "node": events.KindNode, "flavor": events.KindResourceFlavor, "cq": events.KindClusterQueue}[f[1]]
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
