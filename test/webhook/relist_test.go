package webhook

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// gate is a TCP proxy between one replica and the API server. hold stops
// passing bytes either way while every connection stays open, so the
// replica sees silence, not an error; cut closes every connection and
// lets bytes pass again, so the replica connects anew and resumes its
// watches from the versions it last saw.
type gate struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	open  chan struct{} // closed while bytes pass
	conns map[net.Conn]bool
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{ln: ln, target: target, open: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(g.open)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.forward(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); g.closeAll() })
	return g
}

func (g *gate) forward(c net.Conn) {
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns[c], g.conns[up] = true, true
	g.mu.Unlock()
	go g.pipe(up, c)
	g.pipe(c, up)
}

// pipe copies src to dst, each chunk once the gate is open.
func (g *gate) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.mu.Lock()
			open := g.open
			g.mu.Unlock()
			<-open
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	g.mu.Lock()
	delete(g.conns, dst)
	delete(g.conns, src)
	g.mu.Unlock()
}

// hold stops every byte until cut.
func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

// cut closes every connection, whatever it held, and opens the gate.
func (g *gate) cut() {
	g.closeAll()
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) closeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		c.Close()
	}
}

// kubeconfigVia writes a copy of the cluster's kubeconfig whose server is
// addr (the same certificate checks hold: it is on 127.0.0.1 too).
func kubeconfigVia(t *testing.T, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	require.NoError(t, err)
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := filepath.Join(t.TempDir(), "via-gate.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

// TestConflictAcrossRelist: in each of 50 rounds, replica A's connection
// to the API server is held silent while replica B admits a team x under
// a Cohort, and then a node whose name sorts before x's (so a relist hands
// it over first, at a later version); etcd is compacted, and A's
// connections are cut. A's AcceleratorQuota watch then resumes from a
// version etcd no longer has (this package's API server keeps no watch
// cache of AcceleratorQuotas), ends with 410 Gone, and A lists again. A
// team y that fits alone but not beside x is sent to A meanwhile: it must
// be denied with the Cohort's overrun, and the stored tree must break no
// rule. A's event stream shows each relist (a QuotaListing beyond its
// first list). At least three rounds in four must be ones in which B had
// removed x's reservation from the ledger before y was sent, so that A
// could learn of x through its relist alone. A is a new replica each
// round: client-go's reflector backs off between one list-and-watch and
// the next, doubling up to 30 s, and a new replica starts from the
// shortest wait.
func TestConflictAcrossRelist(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	lb := freePort(t)
	installConfig(t, lb)
	b := startReplica(t, "relist-b", freePort(t))
	bal := startBalancer(t, lb, [2]int{b.port, b.port})
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "relist-") })

	u, err := url.Parse(cluster.Config.Host)
	require.NoError(t, err)
	apiserver := u.Host
	rounds := 50
	if v := os.Getenv("OME_RELIST_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	toB := func() {
		bal.backends[0].Store(int64(b.port))
		bal.backends[1].Store(int64(b.port))
	}
	// prepare creates round i's Cohort and starts its replica A, behind a
	// gate of its own, while the round before runs.
	type replicaA struct {
		r     *replica
		g     *gate
		ready time.Time
		err   error
	}
	prepare := func(i int) <-chan replicaA {
		ch := make(chan replicaA, 1)
		_, err := aqs.Create(ctx, aqtest.Cohort(fmt.Sprintf("relist-%02d", i), "root").Budget(gpu, "a100", "10").Obj(), metav1.CreateOptions{})
		if err != nil {
			ch <- replicaA{err: err}
			return ch
		}
		g := newGate(t, apiserver)
		kubeconfig := kubeconfigVia(t, g.ln.Addr().String())
		port := freePort(t)
		go func() {
			r, err := launch(t, fmt.Sprintf("relist-a-%02d", i), port, nil, "--kubeconfig="+kubeconfig)
			ch <- replicaA{r: r, g: g, ready: time.Now(), err: err}
		}()
		return ch
	}
	next := prepare(0)
	pruned := 0
	for i := 0; i < rounds; i++ {
		c := fmt.Sprintf("relist-%02d", i)
		ra := <-next
		require.NoError(t, ra.err, "round %d: starting replica A", i)
		a, g := ra.r, ra.g
		if i+1 < rounds {
			next = prepare(i + 1)
		}
		listings := a.metric(t, "ome_quota_events_total", `kind="QuotaListing"`)
		// A watch that ends within a second of its start makes the
		// reflector list again whatever the reason; an older one resumes
		// from its version, which is the path under test.
		time.Sleep(time.Until(ra.ready.Add(1500 * time.Millisecond)))

		g.hold()
		x := aqtest.Team(c+"-z", c).Budget(gpu, "a100", "6").Obj()
		_, err = aqs.Create(ctx, x, metav1.CreateOptions{})
		require.NoError(t, err, "round %d: B refused x", i)
		// A reserved write that sorts before x, stored after it: B's
		// reservation for it removes x's, settled, and raises the floor.
		_, err = aqs.Create(ctx, aqtest.Cohort(c+"-c", "root").Obj(), metav1.CreateOptions{})
		require.NoError(t, err, "round %d: B refused the later write", i)
		if len(reservationsOf(t, x.Name)) == 0 {
			pruned++
		}
		_, err = cluster.CompactEtcd(ctx)
		require.NoError(t, err)

		bal.backends[0].Store(int64(a.port))
		bal.backends[1].Store(int64(a.port))
		y := aqtest.Team(c+"-y", c).Budget(gpu, "a100", "6").Obj()
		done := make(chan error, 1)
		go func() {
			done <- retried(ctx, func(ctx context.Context) error {
				_, err := aqs.Create(ctx, y, metav1.CreateOptions{})
				return err
			})
		}()
		g.cut()
		err = <-done
		toB()
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is 10 but its children total 12") {
			t.Fatalf("round %d: y was answered %v, want a denial of the Cohort's overrun", i, err)
		}
		if v := storedViolations(t, aqs, "relist-"); len(v) > 0 {
			t.Fatalf("round %d: the stored tree breaks rules: %v", i, v)
		}
		// y may be denied before the relist, on x's reservation: the
		// relist still comes.
		eventually(t, time.Minute, func() string {
			if n := a.metric(t, "ome_quota_events_total", `kind="QuotaListing"`); n <= listings {
				return fmt.Sprintf("round %d: A did not list again (%v listings)", i, n)
			}
			return ""
		})
		a.Stop()
	}
	t.Logf("rounds in which B had removed x's reservation before y was sent: %d of %d; reviews through the balancer: %d",
		pruned, rounds, bal.sent[0].Load()+bal.sent[1].Load())
	// Only those rounds test the fence: in the others, A read x's
	// reservation in the ledger and denied y on it.
	require.GreaterOrEqual(t, pruned, max(1, rounds*3/4), "too few rounds reached the fence through the relist alone: the test proved little")
}
