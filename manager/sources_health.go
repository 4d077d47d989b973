package manager

import (
	"context"
	"errors"
	"io"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/events"
)

// sourceHealth turns lasting failures of the informers that capacity is
// measured from (nodes, and with DRA deviceclasses and resourceslices) into
// events, so that the state stops refreshing root's observedAt stamps while
// one fails and the guide's liveness check and the stale-reporting alert
// see it. A source fails from an error of its informer's list or watch
// (other than a watch ending as watches do) until the informer lists or
// watches again (its last synced resourceVersion moves), and while a
// periodic list of one object fails: a watch already open outlives a
// revoked right for minutes, the list does not. Each change is published
// once, as SourceFailed or SourceRecovered.
type sourceHealth struct {
	pub events.Publisher
	now func() time.Time

	mu      sync.Mutex
	sources map[string]*source
	kick    chan struct{}
}

type source struct {
	inf   cache.SharedIndexInformer
	probe func(context.Context) error
	// watchErr is the informer's last error, while it has not listed or
	// watched since (its last synced resourceVersion was since then).
	watchErr error
	since    string
	probeErr error
	// published is the failure last published, nil when none.
	published error
}

func newSourceHealth(pub events.Publisher, now func() time.Time) *sourceHealth {
	return &sourceHealth{pub: pub, now: now, sources: map[string]*source{}, kick: make(chan struct{}, 1)}
}

// watch follows the informer inf of a source, and probe, a list of one of
// its objects; call it before inf starts.
func (h *sourceHealth) watch(ctx context.Context, name string, inf cache.SharedIndexInformer, probe func(context.Context) error) error {
	h.mu.Lock()
	src := &source{inf: inf, probe: probe}
	h.sources[name] = src
	h.mu.Unlock()
	return inf.SetWatchErrorHandlerWithContext(func(hctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(hctx, r, err)
		if routineWatchEnd(err) || ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		src.watchErr, src.since = err, inf.LastSyncResourceVersion()
		h.mu.Unlock()
		select {
		case h.kick <- struct{}{}:
		default:
		}
	})
}

// probeList is a source's probe: one object, from the API server's watch
// cache, which is authorized like any list.
var probeList = metav1.ListOptions{Limit: 1, ResourceVersion: "0"}

// probeInterval is how often the sources are probed: twice per report
// interval, so that root's stamps stop within one interval of a revoked
// right, and at least every 30 s.
func (o *Options) probeInterval() time.Duration {
	if d := o.ReportInterval / 2; d > 0 && d < 30*time.Second {
		return max(d, time.Second)
	}
	return 30 * time.Second
}

// routineWatchEnd reports whether err is an informer's watch ending as
// watches do (closed, or its resourceVersion too old), not a failure.
func routineWatchEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) ||
		apierrors.IsGone(err) || errors.Is(err, context.Canceled)
}

// run probes every source every probeEvery, and publishes each change of a
// source's health (checked every second and at each watch error), until
// ctx is done.
func (h *sourceHealth) run(ctx context.Context, probeEvery time.Duration) {
	check := time.NewTicker(time.Second)
	defer check.Stop()
	var lastProbe time.Time
	for {
		if time.Since(lastProbe) >= probeEvery {
			lastProbe = time.Now()
			h.probeAll(ctx)
		}
		if err := h.publish(ctx); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		case <-check.C:
		}
	}
}

func (h *sourceHealth) probeAll(ctx context.Context) {
	h.mu.Lock()
	srcs := make(map[string]*source, len(h.sources))
	for n, s := range h.sources {
		srcs[n] = s
	}
	h.mu.Unlock()
	for _, s := range srcs {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		s.probeErr = err
		h.mu.Unlock()
	}
}

// publish sends an event for each source whose health changed.
func (h *sourceHealth) publish(ctx context.Context) error {
	log := klog.FromContext(ctx)
	type change struct {
		name string
		err  error
	}
	var changes []change
	h.mu.Lock()
	for name, s := range h.sources {
		if s.watchErr != nil && s.inf.LastSyncResourceVersion() != s.since {
			s.watchErr = nil // it listed or watched since
		}
		cur := s.probeErr
		if s.watchErr != nil {
			cur = s.watchErr
		}
		if (cur == nil) != (s.published == nil) || (cur != nil && cur.Error() != s.published.Error()) {
			if (cur == nil) != (s.published == nil) {
				changes = append(changes, change{name, cur})
			}
			s.published = cur
		}
	}
	h.mu.Unlock()
	sort.Slice(changes, func(i, j int) bool { return changes[i].name < changes[j].name })
	for _, c := range changes {
		ev := events.SourceRecovered(h.now(), c.name)
		if c.err != nil {
			log.Error(c.err, "a capacity source fails: root's observedAt stamps stop until it recovers", "source", c.name)
			ev = events.SourceFailed(h.now(), c.name, c.err.Error())
		} else {
			log.Info("a capacity source recovered: root's observedAt stamps move again", "source", c.name)
		}
		if _, err := h.pub.Publish(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}
