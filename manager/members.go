package manager

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// MemberSource reads one member cluster for a management plane and publishes
// what it finds as Member events: its ResourceFlavors and its root's
// capacity when it answers, and why not when it does not. It reads by
// polling (Poll, every Interval in Run), two requests a round (the root
// AcceleratorQuota and the list of ResourceFlavors) and a third with an
// Origin (the plane's copies there), together bounded by Timeout. It publishes only a change: a member whose flavors and marks
// stay the same costs the stream nothing. A member without root (its own
// manager has not created it, or it was deleted) counts as not answering,
// so that the plane keeps the member's shares rather than moving them.
type MemberSource struct {
	Name   string
	Quotas versioned.Interface
	Kueue  kueueclient.Interface
	// Origin is the plane's origin label: the status of the member's
	// copies of that origin says what its Kueue admitted and borrowed for
	// them (a third request a round). Empty reads no copies.
	Origin string
	// Publish puts an event on the plane's stream.
	Publish func(events.Event)
	// Now stamps the events.
	Now      func() time.Time
	Interval time.Duration
	Timeout  time.Duration

	last *events.Member // what was published last; nil before the first
}

// Run polls until ctx ends.
func (m *MemberSource) Run(ctx context.Context) {
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		m.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads the member once and publishes a Member event when what it
// read differs from what it published last. It returns the event it
// published, or nil.
func (m *MemberSource) Poll(ctx context.Context) *events.Event {
	ev := m.read(ctx)
	if ctx.Err() != nil {
		return nil // stopping: a cancelled read says nothing of the member
	}
	cur := ev.Member
	if m.last != nil && m.last.Reachable == cur.Reachable && (!cur.Reachable || reflect.DeepEqual(sortedCapacity(m.last), sortedCapacity(cur)) &&
		reflect.DeepEqual(m.last.Flavors, cur.Flavors) && reflect.DeepEqual(usageText(m.last), usageText(cur))) {
		return nil // unchanged; an unreachable member is reported once per outage
	}
	m.last = cur
	m.Publish(ev)
	return &ev
}

func (m *MemberSource) read(ctx context.Context) events.Event {
	ctx, cancel := context.WithTimeout(ctx, m.Timeout)
	defer cancel()
	now := m.Now()
	root, err := m.Quotas.OmeV1beta1().AcceleratorQuotas().Get(ctx, v1beta1.RootName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return events.MemberLost(now, m.Name, "the member has no root AcceleratorQuota: its workload-mode manager has not created it; its shares are kept until it does")
	case err != nil:
		return events.MemberLost(now, m.Name, fmt.Sprintf("reading the member's root: %v", err))
	}
	flavors, err := m.Kueue.KueueV1beta2().ResourceFlavors().List(ctx, metav1.ListOptions{})
	if err != nil {
		return events.MemberLost(now, m.Name, fmt.Sprintf("listing the member's ResourceFlavors: %v", err))
	}
	names := make([]string, 0, len(flavors.Items))
	for _, f := range flavors.Items {
		names = append(names, f.Name)
	}
	capacity := make([]events.MemberCapacity, 0, len(root.Status.Capacity))
	for _, c := range root.Status.Capacity {
		capacity = append(capacity, events.MemberCapacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor,
			Allocatable: c.Allocatable, HighWaterMark: c.HighWaterMark})
	}
	ev := events.MemberSeen(now, m.Name, names, capacity)
	if m.Origin != "" {
		copies, err := m.Quotas.OmeV1beta1().AcceleratorQuotas().List(ctx, metav1.ListOptions{LabelSelector: v1beta1.OriginLabel + "=" + m.Origin})
		if err != nil {
			return events.MemberLost(now, m.Name, fmt.Sprintf("listing the plane's copies on the member: %v", err))
		}
		for _, aq := range copies.Items {
			ev.Member.Copies = append(ev.Member.Copies, copyOf(&aq))
			if aq.Spec.Role != v1beta1.RoleClusterQueue {
				continue
			}
			for _, b := range aq.Status.Budgets {
				ev.Member.Usage = append(ev.Member.Usage, events.MemberUsage{Node: aq.Name, Resource: b.ResourceName, Flavor: b.ResourceFlavor,
					Admitted: b.Admitted, Borrowed: b.Borrowed})
			}
		}
		events.SortUsage(ev.Member.Usage)
		slices.SortFunc(ev.Member.Copies, func(a, b events.MemberCopy) int { return cmp.Compare(a.Node, b.Node) })
	}
	return ev
}

// copyOf is how one copy stands: the plane's generation it was made from,
// and that generation again once the member's manager reports its Kueue
// objects in place for the copy's current spec.
func copyOf(aq *v1beta1.AcceleratorQuota) events.MemberCopy {
	c := events.MemberCopy{Node: aq.Name}
	c.Applied, _ = strconv.ParseInt(aq.Annotations[v1beta1.SourceGenerationAnnotation], 10, 64)
	if m := apimeta.FindStatusCondition(aq.Status.Conditions, v1beta1.ConditionMaterialized); m != nil &&
		m.Status == metav1.ConditionTrue && m.ObservedGeneration == aq.Generation {
		c.Materialized = c.Applied
	}
	return c
}

// usageText is a member's usage with quantities in canonical form, for
// comparing two reads.
func usageText(m *events.Member) []string {
	out := make([]string, 0, len(m.Usage)+len(m.Copies))
	for _, u := range m.Usage {
		out = append(out, u.Node+" "+u.Resource+"@"+u.Flavor+"="+u.Admitted.String()+"/"+u.Borrowed.String())
	}
	for _, c := range m.Copies {
		out = append(out, fmt.Sprintf("copy %s %d/%d", c.Node, c.Applied, c.Materialized))
	}
	return out
}

// sortedCapacity is a member's capacity with quantities in canonical form,
// for comparing two reads.
func sortedCapacity(m *events.Member) []string {
	out := make([]string, len(m.Capacity))
	for i, c := range m.Capacity {
		out[i] = c.Resource + "@" + c.Flavor + "=" + c.Allocatable.String() + "/" + c.HighWaterMark.String()
	}
	return out
}
