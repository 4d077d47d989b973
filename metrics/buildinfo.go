package metrics

import (
	"cmp"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// VCS is the binary's module version and, when it was built from a
// checkout, its VCS revision ("+dirty" for local changes; "" when unknown).
func VCS() (version, revision string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", ""
	}
	var dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if revision != "" {
		revision += dirty
	}
	return bi.Main.Version, revision
}

// buildInfo is ome_quota_build_info: 1, labelled with the binary's module
// version, VCS revision and Go version.
type buildInfo struct {
	desc   *prometheus.Desc
	labels []string
}

func newBuildInfo() *buildInfo {
	version, revision := VCS()
	return &buildInfo{desc: mBuildInfo.desc(), labels: []string{version, cmp.Or(revision, "unknown"), runtime.Version()}}
}

func (b *buildInfo) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *buildInfo) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, 1, b.labels...)
}
