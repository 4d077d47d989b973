package quotactl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/state"
)

// clients are the API clients the commands read with.
type clients struct {
	quotas versioned.Interface
	kube   kubernetes.Interface
	kueue  kueueclient.Interface
}

func newClients(cfg *rest.Config) (*clients, error) {
	q, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kq, err := kueueclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &clients{quotas: q, kube: k, kueue: kq}, nil
}

// cluster is what the commands read of the cluster, listed once.
type cluster struct {
	quotas  []v1beta1.AcceleratorQuota
	nodes   []corev1.Node
	flavors []kueue.ResourceFlavor
	queues  []kueue.ClusterQueue
}

// read lists the tree, the Nodes, the ResourceFlavors and the ClusterQueues.
// An AcceleratorQuota the types cannot read (OME's CRD allows a string
// priorityTier) is left out, as the manager leaves it out of the tree,
// with a warning on warn.
func (c *clients) read(ctx context.Context, warn io.Writer) (*cluster, error) {
	out := &cluster{}
	raw, err := c.quotas.OmeV1beta1().RESTClient().Get().Resource("acceleratorquotas").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("reading the list of AcceleratorQuotas: %w", err)
	}
	for _, item := range list.Items {
		var aq v1beta1.AcceleratorQuota
		if err := json.Unmarshal(item, &aq); err != nil {
			var named struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			_ = json.Unmarshal(item, &named)
			fmt.Fprintf(warn, "Warning: AcceleratorQuota %s cannot be read (%v); it is left out here, as the quota manager leaves it out of the tree\n", named.Metadata.Name, err)
			continue
		}
		out.quotas = append(out.quotas, aq)
	}
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out.nodes = nodes.Items
	flavors, err := c.kueue.KueueV1beta2().ResourceFlavors().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out.flavors = flavors.Items
	queues, err := c.kueue.KueueV1beta2().ClusterQueues().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out.queues = queues.Items
	return out, nil
}

func (cl *cluster) quota(name string) *v1beta1.AcceleratorQuota {
	for i := range cl.quotas {
		if cl.quotas[i].Name == name {
			return &cl.quotas[i]
		}
	}
	return nil
}

// replayer feeds events to a state, numbering them.
type replayer struct {
	s   *state.State
	seq uint64
	now time.Time
}

func newReplayer(cfg events.Config, now time.Time) *replayer {
	r := &replayer{s: state.New(), now: now}
	r.apply(events.ConfigChanged(now, cfg))
	return r
}

func (r *replayer) apply(ev events.Event) []state.Transition {
	r.seq++
	ev.Seq = r.seq
	return r.s.Apply(ev)
}

// replay builds the core's state of the cluster as the manager would from
// its informers: the configuration, the ResourceFlavors, the Nodes, the
// tree (root's stored marks read back), the ClusterQueues' usage, then a
// Tick, the first measurement.
func (cl *cluster) replay(cfg events.Config, now time.Time) *replayer {
	return cl.replayWithout(cfg, now, nil)
}

// replayWithout replays the cluster as the manager holds it (root's marks
// read back from its status, then a measurement with every Node), then
// deletes the Nodes named in without, one after another as the manager
// would see their deletions, each moving the marks by the hysteresis rule.
func (cl *cluster) replayWithout(cfg events.Config, now time.Time, without map[string]bool) *replayer {
	if members := cl.planeMembers(); members != nil {
		// A management plane: its members' flavors and marks are what
		// root's status kept of them, which the state reads back.
		cfg.Mode, cfg.Members = events.ModeManagement, members
		cfg = cfg.Normalized()
	}
	r := newReplayer(cfg, now)
	for i := range cl.flavors {
		r.apply(events.FlavorUpserted(now, sources.FlavorOf(&cl.flavors[i])))
	}
	for i := range cl.nodes {
		r.apply(events.NodeUpserted(now, sources.NodeOf(&cl.nodes[i])))
	}
	for i := range cl.quotas {
		r.apply(events.QuotaUpserted(now, sources.QuotaOf(&cl.quotas[i])))
	}
	for i := range cl.queues {
		r.apply(events.QueueUpserted(now, sources.QueueOf(&cl.queues[i])))
	}
	if cfg.Mode == events.ModeManagement {
		for _, ev := range cl.memberReports(now) {
			r.apply(ev)
		}
	}
	// Every object is in: the state measures from here on, as the manager
	// does after its informers' initial lists. Then the named Nodes go, as
	// if they were deleted while the manager runs, and it measures again.
	r.apply(events.Synced(now))
	r.apply(events.Tick(now))
	if len(without) > 0 {
		for i := range cl.nodes {
			if without[cl.nodes[i].Name] {
				r.apply(events.Deleted(now, events.KindNode, cl.nodes[i].Name))
			}
		}
		r.apply(events.Tick(now))
	}
	return r
}

// memberReports are, on a management plane, each member as its statuses
// kept it: its flavors and capacity from root's status.capacity, and what
// its Kueue admitted, reserved and borrowed for each team's copy from the
// team's status.budgets[].perCluster, as the plane last heard of them.
func (cl *cluster) memberReports(now time.Time) []events.Event {
	root := cl.quota(v1beta1.RootName)
	if root == nil {
		return nil
	}
	flavors := map[string][]string{}
	capacity := map[string][]events.MemberCapacity{}
	for _, c := range root.Status.Capacity {
		for _, pc := range c.PerCluster {
			flavors[pc.Cluster] = append(flavors[pc.Cluster], c.ResourceFlavor)
			capacity[pc.Cluster] = append(capacity[pc.Cluster], events.MemberCapacity{Resource: c.ResourceName, Flavor: c.ResourceFlavor,
				Allocatable: pc.Allocatable, HighWaterMark: pc.HighWaterMark})
		}
	}
	usage := map[string][]events.MemberUsage{}
	for i := range cl.quotas {
		q := &cl.quotas[i]
		for _, b := range q.Status.Budgets {
			for _, pc := range b.PerCluster {
				usage[pc.Cluster] = append(usage[pc.Cluster], events.MemberUsage{Node: q.Name, Resource: b.ResourceName, Flavor: b.ResourceFlavor,
					Admitted: pc.Admitted, Reserved: pc.Reserved, Borrowed: pc.Borrowed})
			}
		}
	}
	var out []events.Event
	for _, name := range slices.Sorted(maps.Keys(capacity)) {
		ev := events.MemberSeen(now, name, slices.Compact(slices.Sorted(slices.Values(flavors[name]))), capacity[name])
		ev.Member.Usage = usage[name]
		events.SortUsage(ev.Member.Usage)
		out = append(out, ev)
	}
	return out
}

// planeMembers are, on a management plane, the member clusters that its
// root's status.capacity lists, sorted; nil on a workload cluster.
func (cl *cluster) planeMembers() []string {
	root := cl.quota(v1beta1.RootName)
	if root == nil {
		return nil
	}
	var out []string
	for _, c := range root.Status.Capacity {
		for _, pc := range c.PerCluster {
			out = append(out, pc.Cluster)
		}
	}
	if out == nil {
		return nil
	}
	return slices.Compact(slices.Sorted(slices.Values(out)))
}

// pairKey is "resource@flavor", the way the commands name a pair.
func pairKey(resourceName, flavor string) string {
	return state.Pair{Resource: resourceName, Flavor: flavor}.String()
}

// parseCapacity reads --capacity values "resource@flavor=N".
func parseCapacity(vals []string) ([]v1beta1.CapacityStatus, error) {
	var out []v1beta1.CapacityStatus
	for _, v := range vals {
		pair, amount, ok := strings.Cut(v, "=")
		res, flavor, ok2 := strings.Cut(pair, "@")
		if !ok || !ok2 || res == "" || flavor == "" {
			return nil, fmt.Errorf("--capacity %q: write it as resource@flavor=N, e.g. nvidia.com/gpu@a100=32", v)
		}
		q, err := resource.ParseQuantity(amount)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("--capacity %q: %q is not a non-negative amount", v, amount)
		}
		out = append(out, v1beta1.CapacityStatus{ResourceName: res, ResourceFlavor: flavor, Allocatable: q, HighWaterMark: q})
	}
	slices.SortFunc(out, func(a, b v1beta1.CapacityStatus) int {
		return strings.Compare(pairKey(a.ResourceName, a.ResourceFlavor), pairKey(b.ResourceName, b.ResourceFlavor))
	})
	return out, nil
}
