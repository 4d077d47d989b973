package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"k8s.io/client-go/tools/cache"
	"os"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/state"
)

// draGroupVersion is the DRA API the manager reads.
const draGroupVersion = "resource.k8s.io/v1"

// draFile is --dra-config in any of its three accepted shapes: the
// manager's own ({deviceClassMappings: [...]}), Kueue's Configuration file
// (config.kueue.x-k8s.io, resources.deviceClassMappings), or the Kueue
// operator's Kueue object (spec.config.resources.deviceClassMappings), so
// that the manager can read the very file Kueue reads.
type draFile struct {
	APIVersion          string                      `json:"apiVersion,omitempty"`
	Kind                string                      `json:"kind,omitempty"`
	DeviceClassMappings []events.DeviceClassMapping `json:"deviceClassMappings,omitempty"`
	Resources           *draResources               `json:"resources,omitempty"`
	Spec                *struct {
		Config *struct {
			Resources *draResources `json:"resources,omitempty"`
		} `json:"config,omitempty"`
	} `json:"spec,omitempty"`
}

type draResources struct {
	DeviceClassMappings []events.DeviceClassMapping `json:"deviceClassMappings,omitempty"`
}

// ParseDRAConfig reads DRA mappings from the contents of a --dra-config
// file and checks them: names, DeviceClass names, counter sources, and
// that every CEL selector compiles.
func ParseDRAConfig(data []byte) ([]events.DeviceClassMapping, error) {
	var f draFile
	var ms []events.DeviceClassMapping
	switch probe := (struct {
		Kind string `json:"kind"`
	}{}); {
	case yaml.Unmarshal(data, &probe) != nil:
		return nil, fmt.Errorf("not YAML: %w", yaml.Unmarshal(data, &probe))
	case probe.Kind == "Configuration" || probe.Kind == "Kueue":
		// Kueue's own files hold much else: read only the mappings.
		if err := yaml.Unmarshal(data, &f); err != nil {
			return nil, err
		}
		if probe.Kind == "Configuration" && f.Resources != nil {
			ms = f.Resources.DeviceClassMappings
		}
		if probe.Kind == "Kueue" && f.Spec != nil && f.Spec.Config != nil && f.Spec.Config.Resources != nil {
			ms = f.Spec.Config.Resources.DeviceClassMappings
		}
	case probe.Kind != "":
		return nil, fmt.Errorf("kind %q: give a file with deviceClassMappings, Kueue's Configuration, or a Kueue object", probe.Kind)
	default:
		if err := yaml.UnmarshalStrict(data, &f); err != nil {
			return nil, fmt.Errorf("%w (the file holds deviceClassMappings: a list of {name, deviceClassNames, sources})", err)
		}
		ms = f.DeviceClassMappings
	}
	cfg := events.Config{DeviceClassMappings: ms}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, m := range ms {
		for _, s := range m.Sources {
			if expr := s.Counter.Expression(); expr != "" {
				if _, err := state.CompileSelector(expr); err != nil {
					return nil, fmt.Errorf("mapping %s: %w", m.Name, err)
				}
			}
		}
	}
	return ms, nil
}

func readDRAConfig(path string) ([]byte, []events.DeviceClassMapping, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--dra-config: %w", err)
	}
	ms, err := ParseDRAConfig(data)
	if err != nil {
		return nil, nil, fmt.Errorf("--dra-config %s: %w", path, err)
	}
	return data, ms, nil
}

// startDRA registers the DeviceClass and ResourceSlice informers when the
// API server serves resource.k8s.io/v1 (and --dra is on), and watches
// --dra-config: a changed file is published as a new Config event; one that
// does not parse is logged and the mappings in force stay.
func (w *workload) startDRA(ctx context.Context, h *sources.Handlers) ([]cache.ResourceEventHandlerRegistration, error) {
	m := w.m
	log := klog.FromContext(ctx)
	if !m.opts.DRA {
		log.Info("DRA capacity is off (--dra=false)")
		return nil, nil
	}
	list, err := m.kube.Discovery().ServerResourcesForGroupVersion(draGroupVersion)
	served := err == nil && list != nil &&
		slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "resourceslices" }) &&
		slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "deviceclasses" })
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("discovering %s: %w", draGroupVersion, err)
	}
	if !served {
		if m.opts.DRAConfig != "" {
			return nil, fmt.Errorf("--dra-config is set but the API server does not serve %s resourceslices and deviceclasses: enable DRA on the cluster, or drop --dra-config", draGroupVersion)
		}
		log.Info("the API server does not serve DRA; measuring Node capacity only", "groupVersion", draGroupVersion)
		return nil, nil
	}
	// An informer that may not list retries forever and the caches never
	// sync: say so now, with the fix.
	one := metav1.ListOptions{Limit: 1}
	for what, list := range map[string]func() error{
		"deviceclasses":  func() error { _, err := m.kube.ResourceV1().DeviceClasses().List(ctx, one); return err },
		"resourceslices": func() error { _, err := m.kube.ResourceV1().ResourceSlices().List(ctx, one); return err },
	} {
		if err := list(); err != nil {
			return nil, fmt.Errorf("listing %s.resource.k8s.io: %w: grant the manager list and watch on deviceclasses and resourceslices in resource.k8s.io, or run with --dra=false", what, err)
		}
	}
	r := m.inf.core.Resource().V1()
	if err := w.health.watch(ctx, "deviceclasses", r.DeviceClasses().Informer(), func(ctx context.Context) error {
		_, err := m.kube.ResourceV1().DeviceClasses().List(ctx, probeList)
		return err
	}); err != nil {
		return nil, err
	}
	if err := w.health.watch(ctx, "resourceslices", r.ResourceSlices().Informer(), func(ctx context.Context) error {
		_, err := m.kube.ResourceV1().ResourceSlices().List(ctx, probeList)
		return err
	}); err != nil {
		return nil, err
	}
	classes, err := r.DeviceClasses().Informer().AddEventHandler(h.DeviceClasses())
	if err != nil {
		return nil, err
	}
	sliceReg, err := r.ResourceSlices().Informer().AddEventHandler(h.ResourceSlices())
	if err != nil {
		return nil, err
	}
	if m.opts.DRAConfig != "" && m.opts.DRAConfigPoll > 0 {
		go m.watchDRAConfig(ctx)
	}
	if m.opts.DRAKueueConfig != "" {
		go m.watchKueueMappings(ctx, max(m.opts.DRAConfigPoll, time.Second))
	}
	return []cache.ResourceEventHandlerRegistration{classes, sliceReg}, nil
}

// watchDRAConfig polls --dra-config (a mounted ConfigMap changes in place,
// without events a watch would see reliably) and publishes each change.
func (m *Manager) watchDRAConfig(ctx context.Context) {
	log := klog.FromContext(ctx)
	last := m.opts.draData
	everyUntil(ctx, m.opts.DRAConfigPoll, func() {
		data, ms, err := readDRAConfig(m.opts.DRAConfig)
		if bytes.Equal(data, last) && data != nil {
			return
		}
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) || last != nil {
				log.Error(err, "the DRA configuration changed and does not read; the mappings in force stay until it is fixed")
			}
			last = data
			return
		}
		last = data
		cfg := m.opts.EventsConfig()
		cfg.DeviceClassMappings = ms
		if err := sources.PublishConfig(ctx, m.stream, cfg, time.Now()); err != nil {
			log.Error(err, "cannot publish the new DRA configuration")
			return
		}
		log.Info("DRA configuration changed", "mappings", len(ms))
	})
}
