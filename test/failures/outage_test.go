package failures

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	quotaclient "ome.io/quota-manager/api/client"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// proxy forwards TCP connections to the API server; cut drops every
// connection and refuses new ones until restore, as an API server that
// goes down and comes back.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
	wg           sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			p.wg.Go(func() { pipe(up, c) })
			p.wg.Go(func() { pipe(c, up) })
		}
	})
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *proxy) restore(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	p.serve(ln)
}

// kubeconfigVia writes a copy of the cluster's kubeconfig whose server is
// the proxy.
func kubeconfigVia(t *testing.T, p *proxy) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	require.NoError(t, err)
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.addr
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

func apiserverAddr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(cluster.Config.Host)
	require.NoError(t, err)
	return u.Host
}

// rootMark reads root's high-water mark for a pair, "" when it has none.
func rootMark(ctx context.Context, resourceName, flavor string) string {
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	if err != nil {
		return err.Error()
	}
	root, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range root.Status.Capacity {
		if c.ResourceName == resourceName && c.ResourceFlavor == flavor {
			return c.HighWaterMark.String()
		}
	}
	return ""
}

// TestAPIServerOutage: the API server becomes unreachable for the manager
// for 10 s and comes back. Meanwhile nothing is written and the manager
// keeps running; afterwards it catches up with what changed during the
// outage (a Node added) without a restart.
func TestAPIServerOutage(t *testing.T) {
	ctx := context.Background()
	const flavor = "outage"
	labels := map[string]string{"example.com/pool": flavor}
	_, err := cluster.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, &kueuev1beta2.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: flavor}, Spec: kueuev1beta2.ResourceFlavorSpec{NodeLabels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	node := func(name string) {
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.FakeNode{Name: name, Labels: labels, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}})
		require.NoError(t, err)
	}
	node("outage-1")
	t.Cleanup(func() {
		_ = cluster.Kueue.KueueV1beta2().ResourceFlavors().Delete(context.Background(), flavor, metav1.DeleteOptions{})
		_ = cluster.Kube.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "example.com/pool=" + flavor})
	})

	p := startProxy(t, apiserverAddr(t))
	m := testutil.LaunchManager(t, cluster, cluster.ManagerBin, "outage", "--webhook=false", "--kubeconfig="+kubeconfigVia(t, p), "--leader-elect=false", "--capacity-report-interval=2s")
	testutil.Eventually(t, 60*time.Second, func() string {
		if got := rootMark(ctx, "nvidia.com/gpu", flavor); got != "8" {
			return "mark on root: " + got
		}
		return ""
	})

	ticks := func() float64 {
		v, err := m.Metric(ctx, "ome_quota_events_total", `kind="Tick"`)
		require.NoError(t, err)
		return v
	}
	p.cut()
	cutAt := time.Now()
	before := ticks()
	node("outage-2")
	// The manager is cut off: it cannot see the Node, so root keeps the
	// old mark, and it keeps running: it applies three ticks (a pass
	// each, every 2 s) and the outage lasts at least 10 s.
	testutil.Eventually(t, 60*time.Second, func() string {
		if n := ticks() - before; n < 3 || time.Since(cutAt) < 10*time.Second {
			return fmt.Sprintf("%v ticks applied in the %s since the cut", n, time.Since(cutAt).Round(time.Second))
		}
		return ""
	})
	require.Equal(t, "8", rootMark(ctx, "nvidia.com/gpu", flavor))
	select {
	case <-m.Done():
		t.Fatalf("the manager exited during the outage (%d)", m.ExitCode())
	default:
	}

	p.restore(t)
	back := time.Now()
	want := resource.MustParse("16")
	testutil.Eventually(t, 60*time.Second, func() string {
		if got := rootMark(ctx, "nvidia.com/gpu", flavor); got != want.String() {
			return "mark on root after the outage: " + got
		}
		return ""
	})
	t.Logf("caught up %s after the API server came back", time.Since(back).Round(100*time.Millisecond))
	if _, err := m.Metric(ctx, "ome_quota_events_total"); err != nil {
		t.Fatal(errors.Join(fmt.Errorf("the manager no longer serves metrics"), err))
	}
}
