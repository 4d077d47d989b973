package state

import (
	"fmt"
	"slices"

	"ome.io/quota-manager/api/v1beta1"
)

// The rules of spec.goneClusters, by which an admin declares member
// clusters of a management plane gone for good (kubectl ome quota forget).
//
//   - Only root carries it: on any other node it breaks NodeKindInvalid
//     (goneOnRootOnly, a rule of CheckKind), in every mode.
//   - A write of root that declares a cluster gone without force is
//     refused while the cluster answers the plane (refuseGone, an
//     admission-only rule): what it holds still counts, and a cluster that
//     answers is not gone. The state keeps the same promise when the
//     webhook is off: a declared cluster that answers is forgotten only
//     once it stops answering (regone).
//   - Outside a management plane nothing may be newly declared gone: a
//     workload cluster has no members to forget.

// goneOnRootOnly appends NodeKindInvalid when a node other than root
// carries spec.goneClusters.
func goneOnRootOnly(dst []Violation, f *Facts) []Violation {
	if f.Name == v1beta1.RootName || len(f.Spec.GoneClusters) == 0 {
		return dst
	}
	return append(dst, Violation{f.Name, ReasonNodeKindInvalid, "goneClusters",
		"spec.goneClusters declares a management plane's member clusters gone, and only root carries it: remove it from this node, and declare the clusters gone on the plane's root (kubectl ome quota forget CLUSTER)"})
}

// newlyDeclared are the entries of next that old does not declare as
// strongly: a cluster old does not name, or names with force while next
// does not.
func newlyDeclared(old, next []v1beta1.GoneCluster) []v1beta1.GoneCluster {
	var out []v1beta1.GoneCluster
	for _, g := range next {
		i := slices.IndexFunc(old, func(o v1beta1.GoneCluster) bool { return o.Name == g.Name })
		if i < 0 || (old[i].Force && !g.Force) {
			out = append(out, g)
		}
	}
	return out
}

// refuseGone is the admission-only rule of root's spec.goneClusters,
// judged against root as the state holds it: a cluster newly declared
// gone without force is refused while it answers the plane (a member, or
// a cluster that left and still holds copies); outside a management plane
// no cluster may be newly declared gone. Entries that stand already are
// let through, so that a later write of root is not refused for a
// cluster that came back.
func (s *State) refuseGone(name string, spec *v1beta1.AcceleratorQuotaSpec) (Admission, bool) {
	if spec == nil || name != v1beta1.RootName {
		return Admission{}, false
	}
	var old []v1beta1.GoneCluster
	if m := s.members[name]; m != nil {
		old = m.spec.GoneClusters
	}
	added := newlyDeclared(old, spec.GoneClusters)
	if len(added) == 0 {
		return Admission{}, false
	}
	names := make([]string, 0, len(added))
	for _, g := range added {
		names = append(names, g.Name)
	}
	if s.fleet == nil {
		return Admission{Message: fmt.Sprintf("root: spec.goneClusters declares %s gone, but this quota manager runs in workload mode, where there are no member clusters to forget: "+
			"declare it on the management plane's root (kubectl ome quota forget CLUSTER, with the plane's context)", listNames(names))}, true
	}
	var answering []string
	for _, g := range added {
		if !g.Force && s.answers(g.Name) {
			answering = append(answering, g.Name)
		}
	}
	if len(answering) == 0 {
		return Admission{}, false
	}
	it, holds := "it", "holds"
	if len(answering) > 1 {
		it, holds = "them", "they hold"
	} else {
		holds = "it holds"
	}
	return Admission{Message: fmt.Sprintf("root: spec.goneClusters declares %s gone without force, but the plane still hears from %s, so what %s still counts against the fleet's budgets: "+
		"declare a cluster gone once the plane no longer reaches it (it is shut down, or its access revoked), "+
		"or set force: true to forget it while it may still admit work (kubectl ome quota forget --force CLUSTER)",
		listNames(answering), it, holds)}, true
}
