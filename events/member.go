package events

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// KindMember is what a management plane learned of one member cluster:
// whether it answers, which ResourceFlavors it has and the capacity its own
// root reports. Its Key is the cluster's name. It came with schema version 8.
const KindMember Kind = "Member"

// ModeManagement is Config.Mode of a management plane; "" is workload mode.
const ModeManagement = "management"

// Member is the payload of a Member event. A reachable member's event
// carries all the plane reads of it, never a delta. An unreachable one's
// carries only why: the state keeps the flavors and capacity it last had,
// so that nothing moves because a link dropped.
type Member struct {
	Reachable bool   `json:"reachable"`
	Message   string `json:"message,omitempty"`
	// Flavors are the member's Kueue ResourceFlavors, sorted.
	Flavors []string `json:"flavors,omitempty"`
	// Capacity is the member's root status.capacity, sorted by resource,
	// then flavor: its high-water marks, already damped by its manager.
	Capacity []MemberCapacity `json:"capacity,omitempty"`
	// Usage is what the member's Kueue admitted, reserved and borrowed for
	// each team of the plane's copies there (their status.budgets), sorted
	// by node, resource and flavor.
	Usage []MemberUsage `json:"usage,omitempty"`
	// Copies are the plane's copies the member holds, sorted by node: the
	// generation of the plane's node each was made from, and the one its
	// Kueue objects were last written from.
	Copies []MemberCopy `json:"copies,omitempty"`
}

// MemberCopy is how one copy stands on a member. Applied is the plane's
// node generation the copy was made from (its source-generation
// annotation); Materialized is that generation when the member's manager
// reports the copy's Kueue objects in place for its current spec, else 0.
// Version is the copy's resourceVersion on the member, and Budgets what
// its spec holds: the plane's writes of a copy are conditional on the
// version it last read (schema version 12).
type MemberCopy struct {
	Node         string       `json:"node"`
	Applied      int64        `json:"applied,omitempty"`
	Materialized int64        `json:"materialized,omitempty"`
	Version      string       `json:"version,omitempty"`
	Budgets      []CopyBudget `json:"budgets,omitempty"`
}

// CopyBudget is one budget of a copy as a member holds it: its nominal
// and its borrowingLimit (0 when unset).
type CopyBudget struct {
	Resource       string            `json:"resource"`
	Flavor         string            `json:"flavor"`
	Nominal        resource.Quantity `json:"nominal"`
	BorrowingLimit resource.Quantity `json:"borrowingLimit,omitzero"`
}

// Equal reports whether two copies stand the same, quantities compared by
// value.
func (c MemberCopy) Equal(o MemberCopy) bool {
	return c.Node == o.Node && c.Applied == o.Applied && c.Materialized == o.Materialized && c.Version == o.Version &&
		slices.EqualFunc(c.Budgets, o.Budgets, func(a, b CopyBudget) bool {
			return a.Resource == b.Resource && a.Flavor == b.Flavor && a.Nominal.Cmp(b.Nominal) == 0 && a.BorrowingLimit.Cmp(b.BorrowingLimit) == 0
		})
}

// MemberUsage is one budget of one copy on a member: what Kueue admitted,
// reserved and borrowed there.
type MemberUsage struct {
	Node     string            `json:"node"`
	Resource string            `json:"resource"`
	Flavor   string            `json:"flavor"`
	Admitted resource.Quantity `json:"admitted"`
	// Reserved came with schema version 9 and is left out when 0, so a
	// line without it reads as it was written.
	Reserved resource.Quantity `json:"reserved,omitzero"`
	Borrowed resource.Quantity `json:"borrowed"`
}

// SortUsage sorts a member's usage as a Member event carries it.
func SortUsage(u []MemberUsage) {
	slices.SortFunc(u, compareUsage)
}

func compareUsage(a, b MemberUsage) int {
	return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Flavor, b.Flavor))
}

// MemberCapacity is one pair of a member's root capacity.
type MemberCapacity struct {
	Resource      string            `json:"resource"`
	Flavor        string            `json:"flavor"`
	Allocatable   resource.Quantity `json:"allocatable"`
	HighWaterMark resource.Quantity `json:"highWaterMark"`
}

// MemberSeen is member cluster read at t: its flavors and capacity.
func MemberSeen(t time.Time, cluster string, flavors []string, capacity []MemberCapacity) Event {
	m := &Member{Reachable: true, Flavors: slices.Sorted(slices.Values(flavors)), Capacity: slices.Clone(capacity)}
	slices.SortFunc(m.Capacity, func(a, b MemberCapacity) int {
		if a.Resource != b.Resource {
			return cmp.Compare(a.Resource, b.Resource)
		}
		return cmp.Compare(a.Flavor, b.Flavor)
	})
	return Event{Time: t, Kind: KindMember, Key: cluster, Member: m}
}

// MemberLost is member cluster not answering from t on, and why.
func MemberLost(t time.Time, cluster, why string) Event {
	return Event{Time: t, Kind: KindMember, Key: cluster, Member: &Member{Message: why}}
}

// validateMember checks a Member event's shape.
func (e *Event) validateMember(count int, first string) error {
	switch {
	case e.Op != "":
		return fmt.Errorf("member event #%d has an op: only object events carry one", e.Seq)
	case e.Key == "":
		return fmt.Errorf("member event #%d has no key: name the member cluster", e.Seq)
	case count != 1 || first != "member":
		return fmt.Errorf("member event #%d must carry exactly one payload, %q", e.Seq, "member")
	}
	m := e.Member
	if !m.Reachable && (len(m.Flavors) > 0 || len(m.Capacity) > 0 || len(m.Usage) > 0 || len(m.Copies) > 0) {
		return fmt.Errorf("member event #%d for %q is unreachable and carries flavors, capacity, usage or copies: an unreachable member's event carries only why", e.Seq, e.Key)
	}
	for i, c := range m.Copies {
		if c.Node == "" || (i > 0 && m.Copies[i-1].Node >= c.Node) {
			return fmt.Errorf("member event #%d for %q lists copies without a node, unsorted or twice: sort them by node", e.Seq, e.Key)
		}
		for j, b := range c.Budgets {
			if b.Resource == "" || b.Flavor == "" {
				return fmt.Errorf("member event #%d for %q has a budget of copy %s without a resource or a flavor", e.Seq, e.Key, c.Node)
			}
			if j > 0 {
				p := c.Budgets[j-1]
				if p.Resource > b.Resource || (p.Resource == b.Resource && p.Flavor >= b.Flavor) {
					return fmt.Errorf("member event #%d for %q lists the budgets of copy %s unsorted or twice (%s@%s): sort them by resource, then flavor", e.Seq, e.Key, c.Node, b.Resource, b.Flavor)
				}
			}
			if b.Nominal.Sign() < 0 || b.BorrowingLimit.Sign() < 0 {
				return fmt.Errorf("member event #%d for %q has a negative budget on copy %s (%s@%s)", e.Seq, e.Key, c.Node, b.Resource, b.Flavor)
			}
		}
	}
	for i, u := range m.Usage {
		if u.Node == "" || u.Resource == "" || u.Flavor == "" {
			return fmt.Errorf("member event #%d for %q has a usage entry without a node, a resource or a flavor", e.Seq, e.Key)
		}
		if i > 0 && compareUsage(m.Usage[i-1], u) >= 0 {
			return fmt.Errorf("member event #%d for %q lists usage unsorted or twice (%s %s@%s): use SortUsage", e.Seq, e.Key, u.Node, u.Resource, u.Flavor)
		}
	}
	if !slices.IsSorted(m.Flavors) || len(slices.Compact(slices.Clone(m.Flavors))) != len(m.Flavors) {
		return fmt.Errorf("member event #%d for %q lists flavors unsorted or twice: use MemberSeen", e.Seq, e.Key)
	}
	for i, c := range m.Capacity {
		if c.Resource == "" || c.Flavor == "" {
			return fmt.Errorf("member event #%d for %q has a capacity entry without a resource or a flavor", e.Seq, e.Key)
		}
		if i > 0 {
			p := m.Capacity[i-1]
			if p.Resource > c.Resource || (p.Resource == c.Resource && p.Flavor >= c.Flavor) {
				return fmt.Errorf("member event #%d for %q lists capacity unsorted or twice (%s@%s): use MemberSeen", e.Seq, e.Key, c.Resource, c.Flavor)
			}
		}
		if c.HighWaterMark.Sign() < 0 || c.Allocatable.Sign() < 0 {
			return fmt.Errorf("member event #%d for %q has a negative capacity for %s@%s", e.Seq, e.Key, c.Resource, c.Flavor)
		}
	}
	return nil
}

// KindMembership is a member cluster joining or leaving a management
// plane's fleet: the plane's inventory (a ClusterProfile, or an entry of
// the members' ConfigMap) lists it, or no longer does. Its Key is the
// cluster's name. It came with schema version 9; before it, a plane's
// members were Config.Members alone.
const KindMembership Kind = "Membership"

// Membership is the payload of a Membership event: whether the cluster is
// in the fleet, where the plane learned so, and what the inventory says
// of its health.
type Membership struct {
	// Member is true while the inventory lists the cluster (joined, or
	// still in); false once it left.
	Member bool `json:"member"`
	// Source names the inventory entry, e.g. "ClusterProfile
	// fleet-system/east" or "ConfigMap ome/ome-quota-manager-members".
	Source string `json:"source,omitempty"`
	// Health is the inventory's word on the cluster's control plane (a
	// ClusterProfile's ControlPlaneHealthy condition): "True", "False",
	// "Unknown", or "" when it says nothing.
	Health string `json:"health,omitempty"`
	// Message says why the cluster left, or why its control plane is not
	// healthy.
	Message string `json:"message,omitempty"`
}

// MembershipChanged is cluster's membership from t on.
func MembershipChanged(t time.Time, cluster string, m Membership) Event {
	return Event{Time: t, Kind: KindMembership, Key: cluster, Membership: &m}
}

// validateMembership checks a Membership event's shape.
func (e *Event) validateMembership(count int, first string) error {
	switch {
	case e.Op != "":
		return fmt.Errorf("membership event #%d has an op: only object events carry one", e.Seq)
	case e.Key == "":
		return fmt.Errorf("membership event #%d has no key: name the member cluster", e.Seq)
	case count != 1 || first != "membership":
		return fmt.Errorf("membership event #%d must carry exactly one payload, %q", e.Seq, "membership")
	}
	switch e.Membership.Health {
	case "", "True", "False", "Unknown":
		return nil
	}
	return fmt.Errorf("membership event #%d for %q has health %q: use True, False, Unknown or nothing", e.Seq, e.Key, e.Membership.Health)
}
