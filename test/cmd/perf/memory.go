package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqinformers "ome.io/quota-manager/api/client/informers/externalversions"
	"ome.io/quota-manager/test/localcluster"
)

// rssLarge writes the Nodes of the large variant and measures the RSS of
// a manager started on them (the tree materialized already).
func (b *bench) rssLarge(ctx context.Context) (memory, error) {
	logf("large variant: %d Nodes in all...", b.sh.more)
	if err := b.writeNodes(ctx, b.sh.nodes, b.sh.more); err != nil {
		return memory{}, err
	}
	m, _, err := b.startMatched(ctx, "m-large")
	if err != nil {
		return memory{}, err
	}
	time.Sleep(5 * time.Second) // the first comparison of every node
	mem, err := b.rss(ctx, m)
	m.Stop()
	return mem, err
}

// measureRSS is the -rss form: the whole tree materialized at matching
// limits, then the two RSS rows of the full run, measured the same way.
func (b *bench) measureRSS(ctx context.Context) error {
	sh := b.sh
	all := b.tree(0, sh.cohorts)
	if err := b.createTree(ctx, all); err != nil {
		return err
	}
	nObjects := sh.cohorts + 1 + sh.cohorts*sh.teamsPerCohort*(1+sh.namespaces)
	logf("manager at matching limits...")
	m, started, err := b.startMatched(ctx, "m-match")
	if err != nil {
		return err
	}
	if _, err := b.waitMaterialized(ctx, started, nObjects, len(all), 10*time.Minute); err != nil {
		m.Kill()
		return err
	}
	rss, err := b.rss(ctx, m)
	m.Stop()
	if err != nil {
		return err
	}
	return b.addRSSRows(ctx, rss)
}

// addRSSRows measures the large variant (rssLarge) and adds the two RSS
// rows of the table: rss, the manager's on the tree at sh.nodes Nodes,
// then the large variant's.
func (b *bench) addRSSRows(ctx context.Context, rss memory) error {
	rssLarge, err := b.rssLarge(ctx)
	if err != nil {
		return err
	}
	b.addRSS(b.sh.nodes, rss)
	b.addRSS(b.sh.more, rssLarge)
	return nil
}

// memory is one RSS measurement: the manager's RSS and Go heap in use,
// and the RSS of the bare informers.
type memory struct {
	rss, heap, bare int64
}

func (b *bench) addRSS(nodes int, m memory) {
	b.t.add(fmt.Sprintf("RSS, %d Nodes (Go heap in use)", nodes), fmt.Sprintf("%s (%s)", mib(m.rss), mib(m.heap)), mib(m.bare)+" bare informers", ratio(float64(m.rss), float64(m.bare)))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// rss reads the manager's RSS, and that of a bare process holding the same
// informers (this binary's informer mode).
func (b *bench) rss(ctx context.Context, m *localcluster.Manager) (mem memory, err error) {
	time.Sleep(3 * time.Second)
	if mem.rss, err = localcluster.RSS(m.Pid()); err != nil {
		return
	}
	heap, err := m.Metric(ctx, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return
	}
	mem.heap = int64(heap)
	self, err := os.Executable()
	if err != nil {
		return
	}
	cmd := exec.CommandContext(ctx, self, "informer", b.c.Kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return
	}
	cmd.Stderr = os.Stderr
	if err = cmd.Start(); err != nil {
		return
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	buf := make([]byte, 64)
	if _, err = out.Read(buf); err != nil {
		return mem, fmt.Errorf("bare informer: %w", err)
	}
	time.Sleep(3 * time.Second)
	mem.bare, err = localcluster.RSS(cmd.Process.Pid)
	return
}

// bareInformer holds the informers the manager holds, prints "synced" and
// waits to be killed.
func bareInformer(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	stop := make(chan struct{})
	core := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(cfg), 0)
	kf := kueueinformers.NewSharedInformerFactory(kueueclient.NewForConfigOrDie(cfg), 0)
	af := aqinformers.NewSharedInformerFactory(versioned.NewForConfigOrDie(cfg), 0)
	core.Core().V1().Nodes().Informer()
	kq := kf.Kueue().V1beta2()
	kq.ResourceFlavors().Informer()
	kq.ClusterQueues().Informer()
	kq.Cohorts().Informer()
	kq.LocalQueues().Informer()
	af.Ome().V1beta1().AcceleratorQuotas().Informer()
	core.Start(stop)
	kf.Start(stop)
	af.Start(stop)
	core.WaitForCacheSync(stop)
	kf.WaitForCacheSync(stop)
	af.WaitForCacheSync(stop)
	runtime.GC()
	fmt.Println("synced")
	select {}
}
