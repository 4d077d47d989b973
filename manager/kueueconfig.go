package manager

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// EventDRAMappingsDiffer is the reason of the Warning Event on root while
// Kueue's DRA mappings differ from the manager's.
const EventDRAMappingsDiffer = "DRAMappingsDiffer"

// watchKueueMappings reads Kueue's own configuration (the ConfigMap
// --dra-kueue-config names, whose values are Kueue Configuration files)
// every interval and compares its resources.deviceClassMappings with the
// mappings in force (the state's configuration). Kueue charges DRA
// devices by its mappings and the manager measures capacity by its own, so
// a difference makes budgets checked against capacity that Kueue does not
// charge: it is reported (ome_quota_dra_mappings_differ, a Warning Event on
// root when it appears, a log line), never acted on. A ConfigMap that
// cannot be read is logged once per cause, and its series removed.
func (m *Manager) watchKueueMappings(ctx context.Context, every time.Duration) {
	log := klog.FromContext(ctx)
	ns, name, _ := strings.Cut(m.opts.DRAKueueConfig, "/")
	t := time.NewTicker(every)
	defer t.Stop()
	lastProblem, lastDiff, announced := "", "", ""
	for {
		diff, problem := m.compareKueueMappings(ctx, ns, name)
		switch {
		case problem != "":
			m.metrics.DRAMappingsDiffer.DeleteLabelValues(m.opts.DRAKueueConfig)
			if problem != lastProblem {
				log.Info("cannot compare the DRA mappings with Kueue's configuration", "configMap", m.opts.DRAKueueConfig, "problem", problem)
			}
			diff = lastDiff
		case diff == "":
			m.metrics.DRAMappingsDiffer.WithLabelValues(m.opts.DRAKueueConfig).Set(0)
			if lastDiff != "" {
				log.Info("the DRA deviceClassMappings match Kueue's again", "configMap", m.opts.DRAKueueConfig)
			}
			announced = ""
		default:
			m.metrics.DRAMappingsDiffer.WithLabelValues(m.opts.DRAKueueConfig).Set(1)
			msg := fmt.Sprintf("the DRA deviceClassMappings differ from Kueue's (ConfigMap %s), so budgets are checked against capacity that Kueue does not charge: %s; give both the same mappings", m.opts.DRAKueueConfig, diff)
			if diff != lastDiff {
				log.Error(nil, msg)
			}
			// The leader says it on root, once per difference.
			if diff != announced && m.leader.Load() && m.announce != nil {
				m.emit(v1beta1.RootName, corev1.EventTypeWarning, EventDRAMappingsDiffer, msg)
				announced = diff
			}
		}
		lastProblem, lastDiff = problem, diff
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// compareKueueMappings says how Kueue's mappings differ from the state's
// ("" when they match), or why it cannot tell.
func (m *Manager) compareKueueMappings(ctx context.Context, ns, name string) (diff, problem string) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cm, err := m.kube.CoreV1().ConfigMaps(ns).Get(rctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Sprintf("ConfigMap %s/%s does not exist: set --dra-kueue-config to Kueue's, or to \"\" to compare nothing", ns, name)
	case err != nil:
		return "", err.Error()
	}
	var theirs []events.DeviceClassMapping
	found := false
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		ms, err := ParseDRAConfig([]byte(cm.Data[k]))
		if err != nil || !strings.Contains(cm.Data[k], "kind:") {
			continue
		}
		theirs, found = ms, true
		break
	}
	if !found {
		return "", fmt.Sprintf("ConfigMap %s/%s holds no Kueue Configuration that reads", ns, name)
	}
	var ours []events.DeviceClassMapping
	m.View(func(st *state.State) { ours = st.Config().DeviceClassMappings })
	return mappingsDiff(ours, theirs), ""
}

// mappingsDiff names the mappings that differ, ours against Kueue's; ""
// when they are the same (normalized).
func mappingsDiff(ours, theirs []events.DeviceClassMapping) string {
	byName := func(ms []events.DeviceClassMapping) map[string]events.DeviceClassMapping {
		out := map[string]events.DeviceClassMapping{}
		for _, m := range (events.Config{DeviceClassMappings: ms}).Normalized().DeviceClassMappings {
			// A mapping's DeviceClasses are a set.
			m.DeviceClassNames = slices.Sorted(slices.Values(m.DeviceClassNames))
			out[m.Name] = m
		}
		return out
	}
	o, k := byName(ours), byName(theirs)
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(o)) {
		km, ok := k[n]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("%s is the quota manager's only", n))
		case !reflect.DeepEqual(o[n], km):
			parts = append(parts, fmt.Sprintf("%s maps %v here and %v in Kueue", n, o[n].DeviceClassNames, km.DeviceClassNames))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(k)) {
		if _, ok := o[n]; !ok {
			parts = append(parts, fmt.Sprintf("%s is Kueue's only", n))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
