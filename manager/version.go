package manager

import "ome.io/quota-manager/metrics"

// Version is the binary's version: its module version and, when it was
// built from a checkout, the VCS revision (with "+dirty" for local changes).
// ome_quota_build_info carries the same two.
func Version() string {
	v, rev := metrics.VCS()
	if rev != "" {
		v += " " + rev
	}
	return v
}
