package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuescheme "sigs.k8s.io/kueue/client-go/clientset/versioned/scheme"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/store"
)

// BenchmarkEventPipeline measures the manager's event throughput from the
// watch to the state, with and without the event log: each notification
// as the API server sends it (a Node or a ClusterQueue in JSON) is decoded
// with client-go's decoder, put through the informer's transform and the
// event sources' handler, published on the stream, and applied by the
// manager's own consumer (Manager.consume: the recorder, the reducer, the
// shell's queues, the metrics), timed until the last event is applied and,
// when recording, in the log. The producer is one goroutine, as one
// informer is; every notification changes what the state reads, so each
// becomes one event. Compare ns/event within one run. The OneCore
// variants run with GOMAXPROCS=1: decoding, applying and recording then
// share one core, the worst case for the log.
func BenchmarkEventPipeline(b *testing.B) {
	const n = 20_000
	notes := pipelineNotifications(b, n)
	run := func(record bool) func(*testing.B) {
		return func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				p := newPipeline(b, record)
				b.StartTimer()
				p.feed(b, notes)
				b.StopTimer()
				p.stop(b)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		}
	}
	oneCore := func(f func(*testing.B)) func(*testing.B) {
		return func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			f(b)
		}
	}
	b.Run("Unrecorded", run(false))
	b.Run("Recorded", run(true))
	b.Run("OneCore/Unrecorded", oneCore(run(false)))
	b.Run("OneCore/Recorded", oneCore(run(true)))
}

// notification is one watch notification's object, encoded.
type notification struct {
	node bool
	raw  []byte
}

// pipelineNotifications are n updates of 1,000 GPU Nodes (seven in ten)
// and 50 ClusterQueues' usage (three in ten), each changing something the
// state reads. The Nodes are modest next to a real cloud GPU Node (no
// images, two managedFields entries): the smaller the Node, the larger
// the log's share of the work.
func pipelineNotifications(b *testing.B, n int) []notification {
	var out []notification
	for i := 0; len(out) < n; i++ {
		var obj any
		node := i%10 < 7
		if node {
			obj = pipelineNode(i%1000, i)
		} else {
			cq := &kueuev1beta2.ClusterQueue{
				TypeMeta:   metav1.TypeMeta{APIVersion: "kueue.x-k8s.io/v1beta2", Kind: "ClusterQueue"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%d", i%50), ResourceVersion: fmt.Sprint(100000 + i), Generation: 3},
				Status: kueuev1beta2.ClusterQueueStatus{
					FlavorsUsage: []kueuev1beta2.FlavorUsage{{Name: "a100", Resources: []kueuev1beta2.ResourceUsage{{
						Name: "nvidia.com/gpu", Total: resource.MustParse(fmt.Sprint(i % 8))}}}},
					FlavorsReservation: []kueuev1beta2.FlavorUsage{{Name: "a100", Resources: []kueuev1beta2.ResourceUsage{{
						Name: "nvidia.com/gpu", Total: resource.MustParse(fmt.Sprint(i % 8))}}}},
					AdmittedWorkloads: int32(i % 8), ReservingWorkloads: int32(i % 8),
				},
			}
			obj = cq
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, notification{node: node, raw: raw})
	}
	return out
}

func pipelineNode(k, i int) *corev1.Node {
	at := metav1.NewTime(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second))
	name := fmt.Sprintf("gpu-node-%d", k)
	gpus := resource.MustParse(fmt.Sprint(8 - i%3)) // a GPU falls off the bus now and then
	list := func(gpus resource.Quantity) corev1.ResourceList {
		return corev1.ResourceList{
			"cpu": resource.MustParse("96"), "memory": resource.MustParse("1574Gi"), "ephemeral-storage": resource.MustParse("3500Gi"),
			"pods": resource.MustParse("110"), "hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
			"nvidia.com/gpu": gpus,
		}
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: at, LastTransitionTime: at}
	}
	ready := corev1.ConditionTrue
	if i%7 == 0 {
		ready = corev1.ConditionFalse
	}
	fields := func(manager string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at,
			FieldsType: "FieldsV1", Subresource: "status", FieldsV1: &metav1.FieldsV1{Raw: []byte(
				`{"f:status":{"f:allocatable":{"f:nvidia.com/gpu":{}},"f:capacity":{"f:nvidia.com/gpu":{}},"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:lastHeartbeatTime":{},"f:status":{}}}}}`)}}
	}
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: "0b8e9f3c-3f0e-4c55-9d53-6f1d2f0c4a11", ResourceVersion: fmt.Sprint(200000 + i), CreationTimestamp: at,
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
				"node.kubernetes.io/instance-type": "p4d.24xlarge", "topology.kubernetes.io/region": "us-east-1",
				"topology.kubernetes.io/zone": "us-east-1a", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
				"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "40960", "gpu.product": "a100", "nodepool": "gpu-a100",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"nfd.node.kubernetes.io/feature-labels": "cpu-cpuid.AVX512F,cpu-cpuid.AVX512VNNI,pci-10de.present",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{fields("kubelet"), fields("nvidia-device-plugin")},
		},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0123456789abcdef0", PodCIDR: "10.0.12.0/24"},
		Status: corev1.NodeStatus{
			Capacity: list(resource.MustParse("8")), Allocatable: list(gpus),
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, ready, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.12.7"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{KernelVersion: "6.1.0-27-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
				ContainerRuntimeVersion: "containerd://1.7.22", KubeletVersion: "v1.35.4", KubeProxyVersion: "v1.35.4",
				OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// pipeline is a manager with its consumer running and no API server: the
// notifications come from the benchmark.
type pipeline struct {
	m      *Manager
	set    *informerSet
	h      *sources.Handlers
	nodes  cache.ResourceEventHandler
	queues cache.ResourceEventHandler
	cached map[string]any
	cancel context.CancelFunc
	done   chan error
}

func newPipeline(b *testing.B, record bool) *pipeline {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{metrics: metrics.New(), st: state.New(), applied: make(chan struct{}), stream: events.NewStream(4096, 1)}
	m.shell, m.mode = newShell(m), newWorkload(m)
	p := &pipeline{m: m, set: &informerSet{}, cancel: cancel, done: make(chan error, 1), cached: map[string]any{}}
	if record {
		l, err := store.Open(b.TempDir(), store.Options{MaxBytes: -1})
		if err != nil {
			b.Fatal(err)
		}
		m.rec = store.NewRecorder(l, 4096, func(_ events.Event, err error) { b.Error(err) })
	}
	go func() { p.done <- m.consume(ctx) }()
	p.h = sources.New(ctx, m.stream, time.Now, func(err error) { b.Error(err) })
	p.nodes, p.queues = p.h.CachedNodes(), p.h.ClusterQueues()
	// The tree the usage and the Nodes count against.
	t0 := time.Now()
	publish := func(ev events.Event) {
		if _, err := m.stream.Publish(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	publish(events.ConfigChanged(t0, events.DefaultConfig()))
	publish(events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}))
	publish(events.QuotaUpserted(t0, &events.Quota{Name: "root", Spec: aqtest.Root().Obj().Spec}))
	for i := 0; i < 50; i++ {
		team := aqtest.Team(fmt.Sprintf("team-%d", i), "root").Budget("nvidia.com/gpu", "a100", "8").Obj()
		publish(events.QuotaUpserted(t0, &events.Quota{Name: team.Name, Generation: 1, Spec: team.Spec}))
	}
	publish(events.Synced(t0))
	// Leading from here on, so that the shell queues the nodes each event
	// changes, as the leader's does; from the start, Synced would ask for
	// a full comparison, which needs the Kueue caches this has not.
	if err := m.waitApplied(ctx, p.lastPublished()); err != nil {
		b.Fatal(err)
	}
	m.leader.Store(true)
	return p
}

// feed delivers the notifications as the informers would, then waits
// until the last event is applied (and in the log).
func (p *pipeline) feed(b *testing.B, notes []notification) {
	core := serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer()
	kq := serializer.NewCodecFactory(kueuescheme.Scheme).UniversalDeserializer()
	for _, n := range notes {
		dec := kq
		if n.node {
			dec = core
		}
		obj, _, err := dec.Decode(n.raw, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		var slim any
		if n.node {
			slim, err = p.set.slimCore(obj)
		} else {
			slim, err = slimKueue(obj)
		}
		if err != nil {
			b.Fatal(err)
		}
		name := slim.(interface{ GetName() string }).GetName()
		key := fmt.Sprintf("%t/%s", n.node, name)
		h := p.queues
		if n.node {
			h = p.nodes
		}
		if old, ok := p.cached[key]; ok {
			h.OnUpdate(old, slim)
		} else {
			h.OnAdd(slim, false)
		}
		p.cached[key] = slim
	}
	last := p.lastPublished()
	if err := p.m.waitApplied(context.Background(), last); err != nil {
		b.Fatal(err)
	}
	if p.m.rec != nil {
		p.m.rec.Wait(last)
	}
}

// lastPublished publishes a last event that changes nothing (team-0 as it
// is; a tick would ask for a full comparison) and returns its number.
func (p *pipeline) lastPublished() uint64 {
	team := aqtest.Team("team-0", "root").Budget("nvidia.com/gpu", "a100", "8").Obj()
	seq, err := p.m.stream.Publish(context.Background(), events.QuotaUpserted(time.Now(), &events.Quota{Name: team.Name, Generation: 1, Spec: team.Spec}))
	if err != nil {
		panic(err)
	}
	return seq
}

func (p *pipeline) stop(b *testing.B) {
	p.cancel()
	if err := <-p.done; err != nil {
		b.Fatal(err)
	}
	p.m.shell.urgent.ShutDown()
	p.m.shell.bulk.ShutDown()
	if p.m.rec != nil {
		if err := p.m.rec.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
