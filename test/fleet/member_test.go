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
	"ome.io/quota-manager/manager/plane"
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

// watchMember runs a member source on cfg until the test ends; what it
// publishes arrives on the channel.
func watchMember(t *testing.T, name string, cfg *rest.Config, origin string) (*plane.MemberSource, <-chan events.Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	published := make(chan events.Event, 64)
	src := &plane.MemberSource{Name: name, Quotas: versioned.NewForConfigOrDie(cfg), Kueue: kueueclient.NewForConfigOrDie(cfg), Origin: origin,
		Publish: func(ev events.Event) { published <- ev },
		Now:     time.Now, Settle: 50 * time.Millisecond, LostAfter: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return src, published
}

// next is the next event the source publishes, within a minute.
func next(t *testing.T, published <-chan events.Event, what string) events.Event {
	t.Helper()
	select {
	case ev := <-published:
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: the event does not validate: %v", what, err)
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatalf("%s: the source published nothing within a minute", what)
	}
	return events.Event{}
}

// The source watches a member into Member events: not answering while it
// has no root, then its flavors and root's marks, nothing for a change
// that moves none of them (after a read that proves it saw the change),
// one event when the link drops, and the member again when it returns.
func TestMemberSource(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(member.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l := newLink(t, u.Host)
	cfg := l.through(member.Config)
	cfg.Timeout = 0

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
	src, published := watchMember(t, "east", cfg, "plane-src")
	ev := next(t, published, "a member without root")
	if ev.Member.Reachable || !strings.Contains(ev.Member.Message, "no root AcceleratorQuota") {
		t.Fatalf("a member without root: %+v", ev.Member)
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
	testutil.Eventually(t, 30*time.Second, func() string {
		ev = next(t, published, "root and a flavor")
		if !ev.Member.Reachable || strings.Join(ev.Member.Flavors, ",") != "a100" || len(ev.Member.Capacity) != 1 ||
			ev.Member.Capacity[0].HighWaterMark.String() != "8" || ev.Member.Capacity[0].Allocatable.String() != "6" {
			return fmt.Sprintf("the member with root and a flavor: %+v", ev.Member)
		}
		return ""
	})

	// A node of the member's own changes nothing the plane reads: the
	// source reads the member again and publishes nothing.
	reads := src.Reads()
	local, err := aqs.Create(ctx, aqtest.Team("src-own", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), local.Name, metav1.DeleteOptions{}) })
	testutil.Eventually(t, 30*time.Second, func() string {
		if src.Reads() == reads {
			return "the source has not read the member since its own node was created"
		}
		return ""
	})
	select {
	case ev := <-published:
		t.Errorf("a change that moves nothing published %+v", ev.Member)
	default:
	}

	l.cut()
	ev = next(t, published, "a cut link")
	if ev.Member.Reachable || ev.Member.Message == "" {
		t.Fatalf("a cut link: %+v", ev.Member)
	}
	l.restore(t)
	ev = next(t, published, "the link restored")
	if !ev.Member.Reachable || len(ev.Member.Capacity) != 1 {
		t.Fatalf("the link restored: %+v", ev.Member)
	}
}
