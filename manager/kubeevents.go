package manager

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// Reasons of the Kubernetes Events the leader emits on AcceleratorQuotas,
// besides the phases a node enters (CapacityExceeded, ContainmentViolated,
// FlavorMissing, ...), which name themselves.
const (
	EventFrozen              = "Frozen"
	EventThawed              = "Thawed"
	EventObjectConflict      = "ObjectConflict"
	EventCapacityMarkLowered = "CapacityMarkLowered"
)

// announcer turns what the consumer applies into Kubernetes Events on the
// AcceleratorQuotas, so that `kubectl describe aq NAME` tells what
// happened to a node and why. It goes through client-go's recorder, whose
// correlator aggregates repeated Events into one with a count and
// rate-limits each object (a burst of 25, then one every 5 minutes). Only
// the leader emits; the consumer never waits on it.
type announcer struct {
	rec   record.EventRecorder
	marks map[state.Pair]state.Amount // root's marks as last seen
}

// startAnnouncer starts the recorder's sink; it stops with ctx.
func (m *Manager) startAnnouncer(ctx context.Context) {
	sch := runtime.NewScheme()
	if err := v1beta1.AddToScheme(sch); err != nil {
		panic(err) // the package's own types: cannot fail
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: m.kube.CoreV1().Events("")})
	b.StartStructuredLogging(4)
	m.mu.Lock()
	m.announce = &announcer{rec: b.NewRecorder(sch, corev1.EventSource{Component: "ome-quota-manager"})}
	m.mu.Unlock()
	go func() { <-ctx.Done(); b.Shutdown() }()
}

// announceApplied emits the Events of one applied event: its transitions,
// and a lowered high-water mark on root. m.mu is held.
func (m *Manager) announceApplied(transitions []state.Transition) {
	a := m.announce
	if a == nil {
		return
	}
	marks := m.st.Marks()
	prev := a.marks
	a.marks = marks
	if !m.leader.Load() {
		return
	}
	for _, t := range transitions {
		reason, typ := string(t.To), corev1.EventTypeWarning
		switch {
		case t.To == state.PhaseDeleted || (t.To == state.PhaseReady && t.From == state.PhasePending):
			continue // created Ready, or gone: nothing to tell on the object
		case t.To == state.PhaseReady:
			reason, typ = EventThawed, corev1.EventTypeNormal
		case t.To == state.PhaseFrozen:
			reason = EventFrozen
		}
		m.emit(t.Node, typ, reason, t.String())
	}
	var lowered []string
	for p, mark := range marks {
		if old, ok := prev[p]; ok && mark < old {
			lowered = append(lowered, fmt.Sprintf("the high-water mark of %s on %s fell from %s to %s", p.Resource, p.Flavor, old, mark))
		}
	}
	sort.Strings(lowered)
	for _, msg := range lowered {
		m.emit(v1beta1.RootName, corev1.EventTypeNormal, EventCapacityMarkLowered, msg)
	}
}

// announceOutcome emits ObjectConflict when a node's outcome becomes one;
// m.mu is held.
func (m *Manager) announceOutcome(node string, prev, o events.Outcome) {
	if m.announce == nil || !m.leader.Load() {
		return
	}
	if o.Kind == events.OutcomeConflict && prev.Kind != events.OutcomeConflict {
		m.emit(node, corev1.EventTypeWarning, EventObjectConflict, o.Message)
	}
}

func (m *Manager) emit(node, typ, reason, msg string) {
	aq := aqGetter(m.inf.aq)(node) // its UID lets kubectl describe find the Event
	if aq == nil {
		return
	}
	m.announce.rec.Event(aq, typ, reason, msg)
	m.metrics.KubeEvents.WithLabelValues(reason).Inc()
	klog.V(2).InfoS("event", "quota", node, "reason", reason, "message", msg)
}
