package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is what the scrape-time collector reads: a copy of the state's
// figures that the manager takes under the reducer's lock, so that one
// scrape sees one consistent state.
type Snapshot struct {
	// Plane is the manager's mode, the plane label of the budget gauges.
	Plane   string
	Budgets []Budget
	// Nodes are the tree's nodes with their readiness.
	Nodes    []Node
	Capacity []Capacity
	// Schedulable, Cordoned and NotReady count Kubernetes Nodes.
	Schedulable, Cordoned, NotReady int
	Unattributed                    []Unattributed
	// UnattributedNodes counts the nodes with unattributed capacity, per reason.
	UnattributedNodes map[string]int
	// DRAUnbudgeted counts devices per DeviceClass that no mapping names.
	DRAUnbudgeted      map[string]int
	EnrolledNamespaces int
	ReportInterval     time.Duration
	// FailingSources are the capacity informers that cannot list or watch.
	FailingSources []string
	StreamDepth    int
	// Members are a management plane's member clusters, Shares each
	// team's budgets split among them, and ShareUsage what each member
	// reported of its copies; nil in workload mode.
	Members    []Member
	Shares     []Share
	ShareUsage []ShareUsage
	// FleetHeld is, on a management plane, what the members may hold of
	// each budget of the fleet tree (state.State.FleetHeld).
	FleetHeld []FleetHeld
}

// FleetHeld is the most the member clusters together may hold of one
// budget of a fleet node.
type FleetHeld struct {
	Quota, Resource, Flavor string
	Held                    float64
}

// Share is one member cluster's share of one fleet budget.
type Share struct {
	Quota, Resource, Flavor, Cluster string
	Nominal                          float64
}

// ShareUsage is what one member cluster's Kueue uses of its copy of one
// fleet budget. A team's budget gauges on the plane are the sum of its
// ShareUsage, pair by pair.
type ShareUsage struct {
	Quota, Resource, Flavor, Cluster string
	Usage
}

// Member is one member cluster of a management plane: whether it
// answers and since when it does not, and how many copies it holds behind
// or lacks.
type Member struct {
	Cluster   string
	Reachable bool
	// SilentSince is when the plane last heard from it, while it does
	// not answer; zero while it does.
	SilentSince  time.Time
	CopiesBehind int
}

// Budget is one budget of one tree node. Usage is set for teams only.
type Budget struct {
	Quota, Role, Resource, Flavor string
	Nominal                       float64
	Usage                         *Usage
}

// Usage is what a team's workloads use of one budget.
type Usage struct{ Admitted, Reserved, Borrowed float64 }

// Node is one tree node's readiness: Reason is Admitted when Ready.
type Node struct {
	Quota, Role, Reason string
	Ready               bool
}

// Capacity is one (resource, flavor) pair of root's capacity.
type Capacity struct {
	Resource, Flavor                  string
	Allocatable, Installed, HighWater float64
	// Unavailable is the installed capacity on cordoned or NotReady nodes.
	Unavailable float64
	ObservedAt  time.Time
}

// Unattributed is capacity of one resource that no flavor's budget can use.
type Unattributed struct {
	Resource, Reason string
	Amount           float64
}

// stateSpecs are the gauges the collector reads from a Snapshot.
var stateSpecs = []Spec{
	mBudgetNominal, mBudgetAdmitted, mBudgetReserved, mBudgetBorrowed, mNodeReady, mNodes,
	mCapacityAllocatable, mCapacityInstalled, mCapacityUnavailable, mCapacityMark, mCapacityObserved, mCapacityReportInterval,
	mCapacityFailing, mCapacityNodes, mUnattributed, mUnattributedNodes, mDRAUnbudgeted, mEnrolled, mStreamDepth,
	mMemberReachable, mBudgetShare, mMemberCopiesBehind,
	mShareAdmitted, mShareReserved, mShareBorrowed, mPlaneInfo, mMemberSilent, mFleetHeld,
}

// stateCollector turns a Snapshot into gauges at scrape time. Nothing is
// kept between scrapes, so a series is gone as soon as its cause is.
type stateCollector struct{ m *Metrics }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range stateSpecs {
		ch <- s.desc()
	}
}

var descs = func() map[string]*prometheus.Desc {
	out := map[string]*prometheus.Desc{}
	for _, s := range stateSpecs {
		out[s.Name] = s.desc()
	}
	return out
}()

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.source.Load()
	if f == nil {
		return
	}
	s := (*f)()
	g := func(spec Spec, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(descs[spec.Name], prometheus.GaugeValue, v, labels...)
	}
	// The API server refuses two budgets on one pair (a list map); a
	// duplicate from elsewhere must not fail the whole scrape.
	seen := make(map[[4]string]bool, len(s.Budgets))
	for _, b := range s.Budgets {
		key := [4]string{b.Quota, b.Role, b.Resource, b.Flavor}
		if seen[key] {
			continue
		}
		seen[key] = true
		l := []string{s.Plane, b.Quota, b.Role, b.Resource, b.Flavor}
		g(mBudgetNominal, b.Nominal, l...)
		if b.Usage != nil {
			g(mBudgetAdmitted, b.Usage.Admitted, l...)
			g(mBudgetReserved, b.Usage.Reserved, l...)
			g(mBudgetBorrowed, b.Usage.Borrowed, l...)
		}
	}
	states := map[string]int{}
	for _, n := range s.Nodes {
		v, st := 0.0, n.Reason
		if n.Ready {
			v, st = 1, "Ready"
		}
		g(mNodeReady, v, n.Quota, n.Role, n.Reason)
		states[st]++
	}
	for st, n := range states {
		g(mNodes, float64(n), st)
	}
	for _, p := range s.Capacity {
		g(mCapacityAllocatable, p.Allocatable, p.Resource, p.Flavor)
		g(mCapacityInstalled, p.Installed, p.Resource, p.Flavor)
		g(mCapacityUnavailable, p.Unavailable, p.Resource, p.Flavor)
		g(mCapacityMark, p.HighWater, p.Resource, p.Flavor)
		if !p.ObservedAt.IsZero() {
			g(mCapacityObserved, float64(p.ObservedAt.UnixMilli())/1000, p.Resource, p.Flavor)
		}
	}
	g(mCapacityReportInterval, s.ReportInterval.Seconds())
	for _, src := range s.FailingSources {
		g(mCapacityFailing, 1, src)
	}
	g(mCapacityNodes, float64(s.Schedulable), "schedulable")
	g(mCapacityNodes, float64(s.Cordoned), "cordoned")
	g(mCapacityNodes, float64(s.NotReady), "not_ready")
	for _, u := range s.Unattributed {
		g(mUnattributed, u.Amount, u.Resource, u.Reason)
	}
	for r, n := range s.UnattributedNodes {
		g(mUnattributedNodes, float64(n), r)
	}
	for dc, n := range s.DRAUnbudgeted {
		g(mDRAUnbudgeted, float64(n), dc)
	}
	if s.Plane != "" {
		g(mPlaneInfo, 1, s.Plane)
	}
	g(mEnrolled, float64(s.EnrolledNamespaces))
	g(mStreamDepth, float64(s.StreamDepth))
	for _, sh := range s.Shares {
		g(mBudgetShare, sh.Nominal, sh.Quota, sh.Resource, sh.Flavor, sh.Cluster)
	}
	for _, u := range s.ShareUsage {
		g(mShareAdmitted, u.Admitted, u.Quota, u.Resource, u.Flavor, u.Cluster)
		g(mShareReserved, u.Reserved, u.Quota, u.Resource, u.Flavor, u.Cluster)
		g(mShareBorrowed, u.Borrowed, u.Quota, u.Resource, u.Flavor, u.Cluster)
	}
	for _, h := range s.FleetHeld {
		g(mFleetHeld, h.Held, h.Quota, h.Resource, h.Flavor)
	}
	var now time.Time
	for _, m := range s.Members {
		v, silent := 0.0, 0.0
		if m.Reachable {
			v = 1
		} else if !m.SilentSince.IsZero() {
			if now.IsZero() {
				now = c.m.now()
			}
			silent = max(now.Sub(m.SilentSince).Seconds(), 0)
		}
		g(mMemberReachable, v, m.Cluster)
		g(mMemberSilent, silent, m.Cluster)
		g(mMemberCopiesBehind, float64(m.CopiesBehind), m.Cluster)
	}
}
