package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/test/localcluster"
)

func (b *bench) startManager(ctx context.Context, name string, qps float64, burst, workers int, extra ...string) (*localcluster.Manager, time.Time, error) {
	args := append([]string{
		"--enrolled-namespaces=" + strings.Join(b.nsNames, ","),
		"--webhook=false", "--leader-elect=false",
		fmt.Sprintf("--kube-api-qps=%g", qps), fmt.Sprintf("--kube-api-burst=%d", burst), fmt.Sprintf("--apply-workers=%d", workers),
	}, extra...)
	started := time.Now()
	m, err := b.c.LaunchManager(ctx, b.bin, name, b.logDir, args...)
	if err != nil {
		return nil, started, err
	}
	if err := m.WaitReady(ctx, 3*time.Minute); err != nil {
		m.Kill()
		return nil, started, err
	}
	return m, started, nil
}

// startMatched starts the manager at the matching limits, without ticks or
// resyncs: the runs compared with the bare client, and the RSS readings.
func (b *bench) startMatched(ctx context.Context, name string, extra ...string) (*localcluster.Manager, time.Time, error) {
	return b.startManager(ctx, name, float64(matchQPS), matchBurst, matchWorkers, append(extra, "--capacity-report-interval=0s", "--resync-interval=1h")...)
}

// materialization is what one manager run took, from its launch.
type materialization struct {
	objects, firstTeam, allMaterialized time.Duration
}

func (b *bench) waitMaterialized(ctx context.Context, started time.Time, objects, nodes int, timeout time.Duration) (materialization, error) {
	var out materialization
	deadline := time.Now().Add(timeout)
	for {
		o, first, all := b.w.progress(objects, nodes)
		if out.objects == 0 && !o.IsZero() {
			out.objects = o.Sub(started)
		}
		if out.firstTeam == 0 && !first.IsZero() {
			out.firstTeam = first.Sub(started)
		}
		if !all.IsZero() {
			out.allMaterialized = all.Sub(started)
		}
		if out.objects > 0 && out.allMaterialized > 0 {
			return out, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return out, fmt.Errorf("not materialized after %s: %d of %d managed objects, %d of %d nodes Materialized", timeout, b.w.objects(), objects, b.w.materialized(), nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// defaultPass starts the manager at the default limits and makes the
// admin changes during its bulk pass; it returns the manager running, the
// times of its materialization and the changes' latencies.
func (b *bench) defaultPass(ctx context.Context, objects, nodes int, extra ...string) (*localcluster.Manager, materialization, []time.Duration, error) {
	d := manager.DefaultOptions()
	logf("manager at the default limits (QPS %g, burst %d, %d workers), with %d admin changes during the bulk pass...", d.KubeAPIQPS, d.KubeAPIBurst, d.ApplyWorkers, b.sh.tries)
	m, started, err := b.startManager(ctx, "m-default", float64(d.KubeAPIQPS), d.KubeAPIBurst, d.ApplyWorkers, append([]string{"--capacity-report-interval=3s", "--resync-interval=3s"}, extra...)...)
	if err != nil {
		return nil, materialization{}, nil, err
	}
	lat := b.adminChanges(ctx, b.sh.tries)
	def, err := b.waitMaterialized(ctx, started, objects, nodes, 20*time.Minute)
	var latencies []time.Duration
	if err == nil {
		latencies, err = lat()
	}
	if err != nil {
		m.Kill()
		return nil, def, nil, err
	}
	return m, def, latencies, nil
}
