package replay

import (
	"slices"
	"strings"

	kueueac "sigs.k8s.io/kueue/client-go/applyconfiguration/kueue/v1beta2"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
)

// Objects are the Kueue objects a manager following the log would have
// left in the cluster: the desired objects of Ready nodes, and for a node
// that is held (frozen, or breaking a rule) the objects it had when it was
// last Ready, since the manager leaves those exactly as they were.
type Objects struct {
	Cohorts       []*kueueac.CohortApplyConfiguration       `json:"cohorts"`
	ClusterQueues []*kueueac.ClusterQueueApplyConfiguration `json:"clusterQueues"`
	LocalQueues   []*kueueac.LocalQueueApplyConfiguration   `json:"localQueues"`
}

// nodeObjects are one node's objects.
type nodeObjects struct {
	cohort *kueueac.CohortApplyConfiguration
	queue  *kueueac.ClusterQueueApplyConfiguration
	locals []*kueueac.LocalQueueApplyConfiguration
}

// trackObjects re-projects after an event that can change what is
// written, keeping held nodes' last objects.
func (r *Result) trackObjects(ev events.Event, transitions int) {
	switch ev.Kind {
	case events.KindAcceleratorQuota, events.KindConfig, events.KindResourceFlavor:
	default:
		if transitions == 0 {
			return
		}
	}
	c := r.State.Config()
	out := projector.Project(projector.FromState(r.State, c.EnrolledNamespaces, projector.CoverResources(c.CoverResources)))
	if !out.Materialize {
		return // nothing is written, nothing swept
	}
	next := map[string]*nodeObjects{}
	get := func(name string) *nodeObjects {
		if next[name] == nil {
			next[name] = &nodeObjects{}
		}
		return next[name]
	}
	for _, o := range out.Cohorts {
		get(*o.Name).cohort = o
	}
	for _, o := range out.ClusterQueues {
		get(*o.Name).queue = o
	}
	for _, o := range out.LocalQueues {
		n := get(*o.Name)
		n.locals = append(n.locals, o)
	}
	for name := range out.Held {
		if prev := r.objects[name]; prev != nil {
			next[name] = prev
		}
	}
	r.objects = next
}

// Objects returns the objects tracked by a replay run with
// Options.Objects, sorted by name (LocalQueues by namespace, then name).
func (r *Result) Objects() Objects {
	out := Objects{Cohorts: []*kueueac.CohortApplyConfiguration{}, ClusterQueues: []*kueueac.ClusterQueueApplyConfiguration{},
		LocalQueues: []*kueueac.LocalQueueApplyConfiguration{}}
	for _, n := range r.objects {
		if n.cohort != nil {
			out.Cohorts = append(out.Cohorts, n.cohort)
		}
		if n.queue != nil {
			out.ClusterQueues = append(out.ClusterQueues, n.queue)
		}
		out.LocalQueues = append(out.LocalQueues, n.locals...)
	}
	slices.SortFunc(out.Cohorts, func(a, b *kueueac.CohortApplyConfiguration) int { return strings.Compare(*a.Name, *b.Name) })
	slices.SortFunc(out.ClusterQueues, func(a, b *kueueac.ClusterQueueApplyConfiguration) int { return strings.Compare(*a.Name, *b.Name) })
	slices.SortFunc(out.LocalQueues, func(a, b *kueueac.LocalQueueApplyConfiguration) int {
		if c := strings.Compare(*a.Namespace, *b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(*a.Name, *b.Name)
	})
	return out
}
