package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is ome_quota_build_info: 1, labelled with the binary's module
// version, VCS revision ("+dirty" for local changes) and Go version.
type buildInfo struct {
	desc   *prometheus.Desc
	labels []string
}

func newBuildInfo() *buildInfo {
	version, revision := "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		dirty := ""
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
		revision += dirty
	}
	return &buildInfo{desc: mBuildInfo.desc(), labels: []string{version, revision, runtime.Version()}}
}

func (b *buildInfo) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *buildInfo) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, 1, b.labels...)
}
