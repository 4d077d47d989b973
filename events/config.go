package events

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of the manager's configuration, as documented in the user guide.
const (
	DefaultMaxTreeDepth      = 5
	DefaultHysteresisPercent = 10
	DefaultReportInterval    = time.Minute
)

// DefaultMeasuredResources are the resources measured when no list is given.
func DefaultMeasuredResources() []string {
	return []string{"google.com/tpu", "nvidia.com/gpu"}
}

// Config is the part of the manager's configuration that the state depends
// on. It travels as an event so that a replay sees the configuration that was
// in force, and so that changing it (an upgrade) re-evaluates the tree.
// A Config event carries the whole configuration, never a delta.
type Config struct {
	// MaxTreeDepth is the deepest a node may sit below root, in edges
	// (--max-tree-depth). 0 turns the check off.
	MaxTreeDepth int `json:"maxTreeDepth"`
	// HysteresisPercent is the band, in percent of the high-water mark, that a
	// drop of installed capacity must exceed to lower the mark
	// (--capacity-hysteresis-percent). 0 makes the mark follow installed.
	HysteresisPercent int `json:"hysteresisPercent"`
	// ReportInterval is how old the observedAt stamps on root may grow before
	// a measurement writes them anew (--capacity-report-interval). 0 turns
	// the refresh off.
	ReportInterval metav1.Duration `json:"reportInterval"`
	// MeasuredResources are the resources counted as accelerators, sorted
	// and without duplicates.
	MeasuredResources []string `json:"measuredResources"`
	// EnrolledNamespaces get a LocalQueue per team (--enrolled-namespaces),
	// sorted and without duplicates; while empty nothing is written to Kueue.
	EnrolledNamespaces []string `json:"enrolledNamespaces,omitempty"`
	// CoverResources are the extra resources every ClusterQueue covers, with
	// their ceilings (--cover-resources), beside cpu, memory and
	// ephemeral-storage.
	CoverResources map[string]resource.Quantity `json:"coverResources,omitempty"`
	// DeviceClassMappings map DRA DeviceClasses to logical resource names
	// (--dra-config), in the shape of Kueue's configuration.
	DeviceClassMappings []DeviceClassMapping `json:"deviceClassMappings,omitempty"`
	// Mode is ModeManagement on a management plane (--mode management),
	// "" in workload mode.
	Mode string `json:"mode,omitempty"`
	// Members are a management plane's member clusters, sorted and
	// without duplicates, as logs of schema version 8 list them; since
	// version 9 the members come from the plane's inventory as Membership
	// events, and a plane writes none here.
	Members []string `json:"members,omitempty"`
	// Origin is a management plane's name on the copies it writes to its
	// members (--origin), which its statuses name (schema version 9).
	Origin string `json:"origin,omitempty"`
	// MemberGrace is how long a management plane waits for a member that
	// has never reported before it splits the fleet's Proportional
	// budgets without it (--member-grace; schema version 12). 0 waits for
	// ever, as older logs did.
	MemberGrace metav1.Duration `json:"memberGrace,omitzero"`
}

// DefaultConfig is the configuration in force before any Config event.
func DefaultConfig() Config {
	return Config{
		MaxTreeDepth:      DefaultMaxTreeDepth,
		HysteresisPercent: DefaultHysteresisPercent,
		ReportInterval:    metav1.Duration{Duration: DefaultReportInterval},
		MeasuredResources: DefaultMeasuredResources(),
	}
}

// Normalized returns a copy of c with MeasuredResources sorted and
// deduplicated, the form that Validate accepts and the state keeps.
func (c Config) Normalized() Config {
	out := c
	out.MeasuredResources = slices.Clone(c.MeasuredResources)
	slices.Sort(out.MeasuredResources)
	out.MeasuredResources = slices.Compact(out.MeasuredResources)
	out.EnrolledNamespaces = slices.Compact(slices.Sorted(slices.Values(c.EnrolledNamespaces)))
	if len(c.CoverResources) > 0 {
		out.CoverResources = maps.Clone(c.CoverResources)
	} else {
		out.CoverResources = nil
	}
	out.DeviceClassMappings = slices.Clone(c.DeviceClassMappings)
	out.Members = slices.Compact(slices.Sorted(slices.Values(c.Members)))
	return out
}

// Equal reports whether two configurations are the same.
func (c Config) Equal(o Config) bool {
	return c.MaxTreeDepth == o.MaxTreeDepth &&
		c.HysteresisPercent == o.HysteresisPercent &&
		c.ReportInterval.Duration == o.ReportInterval.Duration &&
		slices.Equal(c.MeasuredResources, o.MeasuredResources) &&
		slices.Equal(c.EnrolledNamespaces, o.EnrolledNamespaces) &&
		maps.EqualFunc(c.CoverResources, o.CoverResources, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }) &&
		mappingsEqual(c.DeviceClassMappings, o.DeviceClassMappings) &&
		c.Mode == o.Mode && slices.Equal(c.Members, o.Members) && c.Origin == o.Origin &&
		c.MemberGrace.Duration == o.MemberGrace.Duration
}

// Validate reports the first thing wrong with c, saying which flag to fix.
func (c Config) Validate() error {
	if c.MaxTreeDepth < 0 {
		return fmt.Errorf("max tree depth is %d: it must be 0 (no limit) or more; fix --max-tree-depth", c.MaxTreeDepth)
	}
	if c.HysteresisPercent < 0 || c.HysteresisPercent > 100 {
		return fmt.Errorf("hysteresis percent is %d: it must be between 0 and 100; fix --capacity-hysteresis-percent", c.HysteresisPercent)
	}
	if c.ReportInterval.Duration < 0 {
		return fmt.Errorf("report interval is %s: it must be 0 (no refresh) or more; fix --capacity-report-interval", c.ReportInterval.Duration)
	}
	for i, r := range c.MeasuredResources {
		if r == "" {
			return fmt.Errorf("measured resource %d is empty: remove it from the measured resources list", i)
		}
		if i > 0 && c.MeasuredResources[i-1] >= r {
			return fmt.Errorf("measured resources must be sorted and unique, but %q follows %q: use Config.Normalized", r, c.MeasuredResources[i-1])
		}
	}
	for i, ns := range c.EnrolledNamespaces {
		if ns == "" {
			return fmt.Errorf("enrolled namespace %d is empty: remove it from --enrolled-namespaces", i)
		}
		if i > 0 && c.EnrolledNamespaces[i-1] >= ns {
			return fmt.Errorf("enrolled namespaces must be sorted and unique, but %q follows %q: use Config.Normalized", ns, c.EnrolledNamespaces[i-1])
		}
	}
	for r, q := range c.CoverResources {
		if r == "" || q.Sign() <= 0 {
			return fmt.Errorf("cover resource %q has ceiling %s: name a resource and give it a positive ceiling in --cover-resources", r, q.String())
		}
	}
	switch {
	case c.Mode != "" && c.Mode != ModeManagement:
		return fmt.Errorf("mode is %q: it must be %q or empty (workload); fix --mode", c.Mode, ModeManagement)
	case c.Mode == "" && len(c.Members) > 0:
		return fmt.Errorf("%d member clusters are listed in workload mode: only a management plane has members; fix --mode", len(c.Members))
	case c.Mode == "" && c.Origin != "":
		return fmt.Errorf("origin %q is set in workload mode: only a management plane writes copies; fix --mode or drop --origin", c.Origin)
	case c.MemberGrace.Duration < 0:
		return fmt.Errorf("member grace is %s: it must be 0 (wait for ever) or more; fix --member-grace", c.MemberGrace.Duration)
	}
	for i, m := range c.Members {
		if m == "" || len(m) > 253 {
			return fmt.Errorf("member cluster %d has an empty name or one longer than 253 characters", i)
		}
		if i > 0 && c.Members[i-1] >= m {
			return fmt.Errorf("member clusters must be sorted and unique, but %q follows %q: use Config.Normalized", m, c.Members[i-1])
		}
	}
	if err := validateMappings(c.DeviceClassMappings); err != nil {
		return fmt.Errorf("%w; fix --dra-config", err)
	}
	return nil
}
