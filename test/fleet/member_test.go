package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/test/testutil"
)

// link is a TCP proxy to the member's API server that a test can cut and
// restore, on the same address, as a network would.
type link struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newLink(t *testing.T, target string) *link {
	t.Helper()
	l := &link{target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(l.cut)
	return l
}

func (l *link) serve(ln net.Listener) {
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", l.target)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, up)
			l.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection through it.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// restore listens again on the same address.
func (l *link) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	l.serve(ln)
}

// through is the member's client configuration, by way of l.
func (l *link) through(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	u, _ := url.Parse(c.Host)
	u.Host = l.addr
	c.Host = u.String()
	c.TLSClientConfig.ServerName = "127.0.0.1"
	return c
}

// The source reads a member into Member events: not answering while it
// has no root, then its flavors and root's marks, nothing while they stay
// the same, one event when the link drops, and the member again when it
// returns.
func TestMemberSource(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(member.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l := newLink(t, u.Host)
	cfg := l.through(member.Config)
	cfg.Timeout = 0
	quotas := versioned.NewForConfigOrDie(cfg)
	var published []events.Event
	src := &manager.MemberSource{Name: "east", Quotas: quotas, Kueue: kueueclient.NewForConfigOrDie(cfg),
		Publish: func(ev events.Event) { published = append(published, ev) },
		Now:     time.Now, Timeout: 2 * time.Second}

	// Start without root (another test of the package may have made it).
	if err := aqs.Delete(ctx, v1beta1.RootName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() string {
		if _, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("root is still there: %v", err)
		}
		return ""
	})
	ev := src.Poll(ctx)
	if ev == nil || ev.Member.Reachable || !strings.Contains(ev.Member.Message, "no root AcceleratorQuota") {
		t.Fatalf("a member without root: %+v", ev)
	}
	if ev := src.Poll(ctx); ev != nil {
		t.Errorf("a second read of the same outage published %+v", ev.Member)
	}

	testutil.A100Flavor(t, member)
	root, err := aqs.Create(ctx, aqtest.Root().Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), "root", metav1.DeleteOptions{}) })
	root.Status.Capacity = []v1beta1.CapacityStatus{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100",
		Allocatable: resource.MustParse("6"), HighWaterMark: resource.MustParse("8"), ObservedAt: metav1.Now()}}
	if _, err := aqs.UpdateStatus(ctx, root, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = src.Poll(ctx)
	if ev == nil || !ev.Member.Reachable || strings.Join(ev.Member.Flavors, ",") != "a100" || len(ev.Member.Capacity) != 1 ||
		ev.Member.Capacity[0].HighWaterMark.String() != "8" || ev.Member.Capacity[0].Allocatable.String() != "6" {
		t.Fatalf("the member with root and a flavor: %+v", ev)
	}
	if err := ev.Validate(); err != nil {
		t.Errorf("the event does not validate: %v", err)
	}
	if ev := src.Poll(ctx); ev != nil {
		t.Errorf("an unchanged member published %+v", ev.Member)
	}

	l.cut()
	ev = src.Poll(ctx)
	if ev == nil || ev.Member.Reachable || ev.Member.Message == "" {
		t.Fatalf("a cut link: %+v", ev)
	}
	l.restore(t)
	ev = src.Poll(ctx)
	if ev == nil || !ev.Member.Reachable || len(ev.Member.Capacity) != 1 {
		t.Fatalf("the link restored: %+v", ev)
	}
	if len(published) != 4 {
		t.Errorf("published %d events, want 4 (no root, seen, lost, seen)", len(published))
	}
}
