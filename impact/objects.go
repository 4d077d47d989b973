package impact

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/kueuesim"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/state"
)

// Settings are the manager's settings that decide its Kueue objects.
type Settings struct {
	Enrolled []string
	Cover    map[string]resource.Quantity
}

// fate is what happens to a node's Kueue objects after the change.
type fate struct {
	// written: the projector writes them anew; held: the node is not
	// Ready and they stay as they are; deleted: the node goes.
	written, held, deleted bool
}

// afterObjects are the Kueue objects once the manager has projected the
// state after the change: each Ready node's desired Cohort or
// ClusterQueue laid over its live object as server-side apply would (the
// fields the manager owns replaced, others such as a ClusterQueue's
// preemption kept), a held node's live objects as they are, a deleted
// team's ClusterQueue still there while it holds admitted Workloads (Kueue
// keeps it, terminating), and every object the manager does not own as it
// is. LocalQueues map namespace/name to a ClusterQueue.
func afterObjects(live kueuesim.Objects, liveLQ map[string]string, before, after *state.State, set Settings, admitted map[string]bool, now time.Time) (kueuesim.Objects, map[string]string, map[string]fate, error) {
	in := projector.Settings(after, projector.Namespaces(set.Enrolled), set.Cover)
	fates := map[string]fate{}
	out := kueuesim.Objects{Flavors: live.Flavors}
	cohorts := map[string]kueue.Cohort{}
	for _, c := range live.Cohorts {
		cohorts[c.Name] = c
	}
	queues := map[string]kueue.ClusterQueue{}
	for _, q := range live.ClusterQueues {
		queues[q.Name] = q
	}
	lqs := map[string]string{}
	for k, v := range liveLQ {
		lqs[k] = v
	}
	if len(in.EnrolledNamespaces) == 0 {
		// Nothing is written while no namespace is enrolled.
		return live, lqs, fates, nil
	}
	for _, nv := range after.Nodes() {
		n, _ := projector.NodeFromState(after, nv.Name)
		no := projector.ProjectNode(&n, in)
		switch {
		case no.Held:
			fates[nv.Name] = fate{held: true}
			continue
		case no.Cohort != nil:
			var desired kueue.Cohort
			if err := roundTrip(no.Cohort, &desired); err != nil {
				return out, nil, nil, err
			}
			cur := cohorts[nv.Name]
			cur.Name, cur.Labels = desired.Name, desired.Labels
			cur.Spec.ParentName = desired.Spec.ParentName
			cohorts[nv.Name] = cur
			delete(queues, nv.Name)
		case no.ClusterQueue != nil:
			var desired kueue.ClusterQueue
			if err := roundTrip(no.ClusterQueue, &desired); err != nil {
				return out, nil, nil, err
			}
			cur := queues[nv.Name]
			cur.Name, cur.Labels = desired.Name, desired.Labels
			cur.Spec.CohortName = desired.Spec.CohortName
			cur.Spec.ResourceGroups = desired.Spec.ResourceGroups
			cur.Spec.NamespaceSelector = desired.Spec.NamespaceSelector
			queues[nv.Name] = cur
			delete(cohorts, nv.Name)
			for _, lq := range no.LocalQueues {
				lqs[*lq.Namespace+"/"+*lq.Name] = nv.Name
			}
		}
		fates[nv.Name] = fate{written: true}
	}
	for _, nv := range before.Nodes() {
		if _, ok := after.Node(nv.Name); ok {
			continue
		}
		fates[nv.Name] = fate{deleted: true}
		delete(cohorts, nv.Name)
		if q, ok := queues[nv.Name]; ok && q.Labels[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue {
			if !admitted[nv.Name] {
				delete(queues, nv.Name)
				continue
			}
			gone := metav1.NewTime(now)
			q.DeletionTimestamp = &gone
			queues[nv.Name] = q
		}
	}
	for _, name := range slices.Sorted(mapsKeys(cohorts)) {
		out.Cohorts = append(out.Cohorts, cohorts[name])
	}
	for _, name := range slices.Sorted(mapsKeys(queues)) {
		out.ClusterQueues = append(out.ClusterQueues, queues[name])
	}
	return out, lqs, fates, nil
}

func roundTrip(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("reading the projector's object back: %w", err)
	}
	return nil
}

// SettingsOf reads the manager's settings back from its live objects, as
// kubectl ome quota status does: the enrolled namespaces are those of the
// managed LocalQueues and of the managed ClusterQueues' namespace
// selectors; the cover resources are the covered resources of a managed
// ClusterQueue that its team budgets none of, with their ceilings.
func SettingsOf(tree *state.State, queues []kueue.ClusterQueue, localQueues []kueue.LocalQueue) Settings {
	var set Settings
	for _, lq := range localQueues {
		if lq.Labels[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue {
			set.Enrolled = append(set.Enrolled, lq.Namespace)
		}
	}
	for _, q := range queues {
		if q.Labels[v1beta1.ManagedByLabel] != v1beta1.ManagedByValue {
			continue
		}
		if sel := q.Spec.NamespaceSelector; sel != nil {
			for _, e := range sel.MatchExpressions {
				if e.Key == "kubernetes.io/metadata.name" {
					set.Enrolled = append(set.Enrolled, e.Values...)
				}
			}
		}
		nv, ok := tree.Node(q.Name)
		if set.Cover != nil || !ok || len(q.Spec.ResourceGroups) == 0 {
			continue
		}
		budgeted := map[string]bool{}
		for _, b := range nv.Spec.Budgets {
			budgeted[b.ResourceName] = true
		}
		set.Cover = map[string]resource.Quantity{}
		for _, rg := range q.Spec.ResourceGroups {
			for _, f := range rg.Flavors {
				for _, r := range f.Resources {
					if !budgeted[string(r.Name)] {
						set.Cover[string(r.Name)] = r.NominalQuota
					}
				}
			}
		}
	}
	if set.Cover == nil {
		set.Cover = projector.DefaultCoverResources()
	}
	set.Enrolled = projector.Namespaces(set.Enrolled)
	return set
}

// LocalQueuesOf maps each LocalQueue, "namespace/name", to its
// ClusterQueue.
func LocalQueuesOf(lqs []kueue.LocalQueue) map[string]string {
	out := make(map[string]string, len(lqs))
	for _, lq := range lqs {
		out[lq.Namespace+"/"+lq.Name] = string(lq.Spec.ClusterQueue)
	}
	return out
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func pairOf(fr kueuesim.FR) state.Pair { return state.Pair{Resource: fr.Resource, Flavor: fr.Flavor} }

func frOf(p state.Pair) kueuesim.FR { return kueuesim.FR{Resource: p.Resource, Flavor: p.Flavor} }

// quantity prints an amount in Kueue's units.
func quantity(res string, v int64) string {
	if res == "cpu" {
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	}
	return resource.NewQuantity(v, resource.DecimalSI).String()
}

func joinUsage(u map[kueuesim.FR]int64) string {
	var parts []string
	for _, fr := range slices.SortedFunc(mapsKeys(u), kueuesim.FR.Compare) {
		if u[fr] != 0 {
			parts = append(parts, fr.String()+"="+quantity(fr.Resource, u[fr]))
		}
	}
	return strings.Join(parts, ",")
}
