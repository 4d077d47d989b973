package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
)

// AppendMarshal appends the encoding of ev (Marshal's bytes, exactly) to
// dst. The envelope and the payloads of the busiest kinds (Node,
// ClusterQueue, Tick, Synced, deletes, failures) are written by hand into
// dst, which a caller reuses from one event to the next; the other payloads
// go through encoding/json. A test holds the two encodings equal.
func AppendMarshal(dst []byte, ev Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return dst, fmt.Errorf("cannot encode event: %w", err)
	}
	t := ev.Time.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		// encoding/json refuses such a time; say it its way.
		b, err := marshalWire(ev)
		return append(dst, b...), err
	}
	start := len(dst)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, SchemaVersion, 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, `,"time":"`...)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","kind":`...)
	dst = appendString(dst, string(ev.Kind))
	if ev.Op != "" {
		dst = append(dst, `,"op":`...)
		dst = appendString(dst, string(ev.Op))
	}
	if ev.Key != "" {
		dst = append(dst, `,"key":`...)
		dst = appendString(dst, ev.Key)
	}
	if ev.Version != 0 {
		dst = append(dst, `,"version":`...)
		dst = strconv.AppendUint(dst, ev.Version, 10)
	}
	var err error
	switch {
	case ev.Node != nil:
		dst = append(dst, `,"node":`...)
		dst, err = appendNode(dst, ev.Node)
	case ev.Queue != nil:
		dst = append(dst, `,"queue":`...)
		dst, err = appendQueue(dst, ev.Queue)
	case ev.Quota != nil:
		dst = append(dst, `,"quota":`...)
		dst, err = appendQuota(dst, ev.Quota)
	case ev.Failure != nil:
		dst = append(dst, `,"failure":{`...)
		sep := ""
		if ev.Failure.Source != "" {
			dst, sep = appendString(append(dst, `"source":`...), ev.Failure.Source), ","
		}
		if ev.Failure.Reason != "" {
			dst = appendString(append(dst, sep+`"reason":`...), ev.Failure.Reason)
		}
		dst = append(dst, '}')
	default:
		// At most one payload is set (Validate): encode it as a field.
		for _, p := range []struct {
			name string
			v    any
			set  bool
		}{
			{"flavor", ev.Flavor, ev.Flavor != nil}, {"config", ev.Config, ev.Config != nil},
			{"start", ev.Start, ev.Start != nil}, {"deviceClass", ev.DeviceClass, ev.DeviceClass != nil},
			{"resourceSlice", ev.ResourceSlice, ev.ResourceSlice != nil}, {"verdict", ev.Verdict, ev.Verdict != nil},
			{"outcome", ev.Outcome, ev.Outcome != nil}, {"leadership", ev.Leadership, ev.Leadership != nil},
			{"drift", ev.Drift, ev.Drift != nil}, {"member", ev.Member, ev.Member != nil},
			{"membership", ev.Membership, ev.Membership != nil},
		} {
			if !p.set {
				continue
			}
			var b []byte
			if b, err = json.Marshal(p.v); err != nil {
				return dst[:start], err
			}
			dst = append(dst, `,"`...)
			dst = append(dst, p.name...)
			dst = append(dst, `":`...)
			dst = append(dst, b...)
		}
	}
	if err != nil {
		return dst[:start], err
	}
	return append(dst, '}'), nil
}

func appendNode(dst []byte, n *Node) ([]byte, error) {
	dst = append(dst, `{"name":`...)
	dst = appendString(dst, n.Name)
	if len(n.Labels) > 0 {
		dst = append(dst, `,"labels":`...)
		dst = appendStringMap(dst, n.Labels)
	}
	var err error
	if len(n.Capacity) > 0 {
		dst = append(dst, `,"capacity":`...)
		if dst, err = appendQuantityMap(dst, n.Capacity); err != nil {
			return dst, err
		}
	}
	if len(n.Allocatable) > 0 {
		dst = append(dst, `,"allocatable":`...)
		if dst, err = appendQuantityMap(dst, n.Allocatable); err != nil {
			return dst, err
		}
	}
	dst = append(dst, `,"ready":`...)
	dst = strconv.AppendBool(dst, n.Ready)
	if n.Unschedulable {
		dst = append(dst, `,"unschedulable":true`...)
	}
	return append(dst, '}'), nil
}

func appendQueue(dst []byte, q *Queue) ([]byte, error) {
	dst = append(dst, `{"name":`...)
	dst = appendString(dst, q.Name)
	if q.Managed {
		dst = append(dst, `,"managed":true`...)
	}
	if len(q.Usage) > 0 {
		dst = append(dst, `,"usage":[`...)
		for i, u := range q.Usage {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"resource":`...)
			dst = appendString(dst, u.Resource)
			dst = append(dst, `,"flavor":`...)
			dst = appendString(dst, u.Flavor)
			var err error
			for _, f := range []struct {
				name string
				q    *resource.Quantity
			}{{`,"admitted":`, &u.Admitted}, {`,"reserved":`, &u.Reserved}, {`,"borrowed":`, &u.Borrowed}} {
				dst = append(dst, f.name...)
				if dst, err = appendQuantity(dst, f.q); err != nil {
					return dst, err
				}
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

func appendQuota(dst []byte, q *Quota) ([]byte, error) {
	dst = append(dst, `{"name":`...)
	dst = appendString(dst, q.Name)
	if q.UID != "" {
		dst = append(dst, `,"uid":`...)
		dst = appendString(dst, q.UID)
	}
	if q.Generation != 0 {
		dst = append(dst, `,"generation":`...)
		dst = strconv.AppendInt(dst, q.Generation, 10)
	}
	dst = append(dst, `,"spec":`...)
	var err error
	if dst, err = appendSpec(dst, &q.Spec); err != nil {
		return dst, err
	}
	if len(q.Capacity) > 0 {
		// Root's alone: rare enough for encoding/json.
		b, err := json.Marshal(q.Capacity)
		if err != nil {
			return dst, err
		}
		dst = append(dst, `,"capacity":`...)
		dst = append(dst, b...)
	}
	if len(q.Conditions) > 0 {
		dst = append(dst, `,"conditions":[`...)
		for i, c := range q.Conditions {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(append(dst, `{"type":`...), c.Type)
			dst = appendString(append(dst, `,"status":`...), c.Status)
			dst = append(dst, `,"since":"`...)
			dst = append(c.Since.AppendFormat(dst, time.RFC3339Nano), `"}`...)
		}
		dst = append(dst, ']')
	}
	if q.Deleting {
		dst = append(dst, `,"deleting":true`...)
	}
	if q.Holds != nil {
		// A plane team's alone: rare enough for encoding/json.
		b, err := json.Marshal(q.Holds)
		if err != nil {
			return dst, err
		}
		dst = append(dst, `,"holds":`...)
		dst = append(dst, b...)
	}
	if q.Guarded {
		dst = append(dst, `,"guarded":true`...)
	}
	if q.Record != "" {
		dst = appendString(append(dst, `,"record":`...), q.Record)
	}
	return append(dst, '}'), nil
}

// appendSpec writes an AcceleratorQuota's spec; the management-mode
// fields (distribution, per-cluster shares) go through encoding/json.
func appendSpec(dst []byte, s *v1beta1.AcceleratorQuotaSpec) ([]byte, error) {
	if s.Distribution != nil || len(s.GoneClusters) > 0 || slices.ContainsFunc(s.Budgets, func(b v1beta1.Budget) bool { return len(b.PerCluster) > 0 }) {
		b, err := json.Marshal(s)
		return append(dst, b...), err
	}
	dst = append(dst, `{"role":`...)
	dst = appendString(dst, string(s.Role))
	if s.ParentRef != nil {
		dst = append(dst, `,"parentRef":{"name":`...)
		dst = append(appendString(dst, s.ParentRef.Name), '}')
	}
	var err error
	if len(s.Budgets) > 0 {
		dst = append(dst, `,"budgets":[`...)
		for i := range s.Budgets {
			b := &s.Budgets[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"resourceName":`...)
			dst = appendString(dst, b.ResourceName)
			dst = append(dst, `,"resourceFlavor":`...)
			dst = appendString(dst, b.ResourceFlavor)
			dst = append(dst, `,"nominal":`...)
			if dst, err = appendQuantity(dst, &b.Nominal); err != nil {
				return dst, err
			}
			if b.BorrowingLimit != nil {
				dst = append(dst, `,"borrowingLimit":`...)
				if dst, err = appendQuantity(dst, b.BorrowingLimit); err != nil {
					return dst, err
				}
			}
			if b.LendingLimit != nil {
				dst = append(dst, `,"lendingLimit":`...)
				if dst, err = appendQuantity(dst, b.LendingLimit); err != nil {
					return dst, err
				}
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if s.PriorityTier != nil {
		dst = append(dst, `,"priorityTier":`...)
		dst = strconv.AppendInt(dst, int64(*s.PriorityTier), 10)
	}
	return append(dst, '}'), nil
}

// sortedKeys returns m's keys in encoding/json's order (byte order), in
// buf when they fit.
func sortedKeys[V any](buf []string, m map[string]V) []string {
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func appendStringMap(dst []byte, m map[string]string) []byte {
	dst, _ = appendMap(dst, m, func(dst []byte, v string) ([]byte, error) { return appendString(dst, v), nil })
	return dst
}

func appendQuantityMap(dst []byte, m map[string]resource.Quantity) ([]byte, error) {
	return appendMap(dst, m, func(dst []byte, q resource.Quantity) ([]byte, error) { return appendQuantity(dst, &q) })
}

// appendMap writes m as encoding/json does: its keys sorted.
func appendMap[V any](dst []byte, m map[string]V, value func([]byte, V) ([]byte, error)) ([]byte, error) {
	var buf [8]string
	dst = append(dst, '{')
	for i, k := range sortedKeys(buf[:], m) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = value(dst, m[k]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendQuantity appends q as Quantity.MarshalJSON writes it: its
// canonical form, quoted.
func appendQuantity(dst []byte, q *resource.Quantity) ([]byte, error) {
	dst = append(slices.Grow(dst, 48), '"')
	n := len(dst)
	// The number is formatted into dst's spare room, in place.
	number, suffix := q.CanonicalizeBytes(dst[n:n])
	if len(number) > 0 && &number[0] == &dst[:n+1][n] {
		dst = dst[:n+len(number)]
	} else {
		dst = append(dst, number...)
	}
	dst = append(dst, suffix...)
	return append(dst, '"'), nil
}

// appendString appends s as a JSON string, as encoding/json writes it:
// the plain ASCII that names and labels are made of is copied; anything
// else (a quote, <, >, &, a control character, non-ASCII) is left to
// encoding/json, to escape it the same way.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
