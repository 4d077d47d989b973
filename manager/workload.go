package manager

import (
	"context"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// workload is the mode of a manager that enforces its own cluster's tree
// (--mode=workload): it measures the cluster's capacity from its Nodes
// and, with DRA, its DeviceClasses and ResourceSlices; reads its
// ResourceFlavors and its ClusterQueues' usage; and watches the Kueue
// objects the applier writes for changes made behind its back (drift.go).
// Each of these is an input of the stream, registered before the
// informers start.
type workload struct {
	m *Manager
	// health publishes the capacity informers' failures
	// (sources_health.go); made by Start.
	health *sourceHealth
	// draProblems are the DRA problems as last logged; touched by the
	// consumer alone (Applied).
	draProblems []string
}

func newWorkload(m *Manager) *workload { return &workload{m: m} }

// kueueAPI is what a workload-mode manager needs of Kueue.
var kueueAPI = API{
	GroupVersion: kueue.GroupVersion.String(), Resources: []string{"clusterqueues", "cohorts", "localqueues", "resourceflavors"},
	What: "Kueue's CRDs",
	Fix:  "install Kueue v0.17 or newer (its manifests or chart install the CRDs)",
}

func (w *workload) APIs() []API { return []API{kueueAPI} }

// Start registers the cluster's inputs on the manager's Kubernetes and
// Kueue informers, the capacity sources' health watch and DRA, and starts
// those informers and the health probes.
func (w *workload) Start(ctx context.Context, handlers *sources.Handlers) ([]cache.ResourceEventHandlerRegistration, error) {
	m := w.m
	kq := m.inf.kueue.Kueue().V1beta2()
	nodes := m.inf.core.Core().V1().Nodes().Informer()
	inputs := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{nodes, handlers.CachedNodes()},
		{kq.ResourceFlavors().Informer(), handlers.Flavors()},
		{kq.ClusterQueues().Informer(), handlers.ClusterQueues()},
		{kq.ClusterQueues().Informer(), drift{m.shell, "ClusterQueue", ctx}},
		{kq.Cohorts().Informer(), drift{m.shell, "Cohort", ctx}},
		{kq.LocalQueues().Informer(), drift{m.shell, "LocalQueue", ctx}},
	}
	var regs []cache.ResourceEventHandlerRegistration
	for _, in := range inputs {
		reg, err := in.inf.AddEventHandler(in.h)
		if err != nil {
			return nil, err
		}
		regs = append(regs, reg)
	}
	w.health = newSourceHealth(m.stream, time.Now)
	if err := w.health.watch(ctx, "nodes", nodes, func(ctx context.Context) error {
		_, err := m.kube.CoreV1().Nodes().List(ctx, probeList)
		return err
	}); err != nil {
		return nil, err
	}
	draRegs, err := w.startDRA(ctx, handlers)
	if err != nil {
		return nil, err
	}
	regs = append(regs, draRegs...)
	m.inf.core.Start(ctx.Done())
	m.inf.kueue.Start(ctx.Done())
	go w.health.run(ctx, m.opts.probeInterval())
	return regs, nil
}

// Applied logs what keeps DRA devices from counting (a selector that does
// not compile, devices a selector failed on) when it changes.
func (w *workload) Applied(ctx context.Context, ev events.Event) {
	switch ev.Kind {
	case events.KindDeviceClass, events.KindResourceSlice, events.KindConfig:
	default:
		return
	}
	var problems []string
	w.m.View(func(st *state.State) { problems = st.DRAProblems() })
	if slices.Equal(problems, w.draProblems) {
		return
	}
	w.draProblems = problems
	log := klog.FromContext(ctx)
	for _, p := range problems {
		log.Error(nil, "DRA devices not counted", "problem", p)
	}
	if len(problems) == 0 {
		log.Info("every DRA selector evaluates")
	}
}

func (w *workload) BecameLeader(context.Context) {}

// NodeApplied reports the applier's outcome: on this cluster it is the
// node's.
func (w *workload) NodeApplied(ctx context.Context, node string, o events.Outcome) (uint64, error) {
	return w.m.reportOutcome(ctx, node, o)
}

func (w *workload) Snapshot(*state.State, *metrics.Snapshot) {}
