package manager

import (
	"context"
	"sync/atomic"

	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// lanes shares one client token bucket (--kube-api-qps, --kube-api-burst)
// between two lanes. The bulk lane lets one request at a time hold a
// reservation of a future token; the urgent lane reserves directly. A bulk
// pass then keeps the whole rate while nothing is urgent, and an urgent
// request waits for at most one bulk token, instead of queueing behind the
// tokens every bulk worker has reserved (16 workers at QPS 100: 160 ms,
// more when each worker holds a node of 21 writes). The total stays the
// operator's: both lanes draw from the one bucket.
type lanes struct {
	lim  *rate.Limiter
	qps  float32
	turn chan struct{} // held by the bulk request that holds a reservation
	// bulkWaiting counts bulk requests waiting for their turn or a token.
	bulkWaiting atomic.Int64
}

func newLanes(qps float32, burst int) *lanes {
	return &lanes{lim: rate.NewLimiter(rate.Limit(qps), burst), qps: qps, turn: make(chan struct{}, 1)}
}

// lane is one side of lanes, a client-go rate limiter.
type lane struct {
	l      *lanes
	urgent bool
}

var _ flowcontrol.RateLimiter = lane{}

func (l lane) Wait(ctx context.Context) error {
	if !l.urgent {
		l.l.bulkWaiting.Add(1)
		defer l.l.bulkWaiting.Add(-1)
		select {
		case l.l.turn <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-l.l.turn }()
	}
	return l.l.lim.Wait(ctx)
}

func (l lane) TryAccept() bool { return l.l.lim.Allow() }
func (l lane) Accept()         { _ = l.Wait(context.Background()) }
func (l lane) Stop()           {}
func (l lane) QPS() float32    { return l.l.qps }

// laneConfigs returns copies of cfg for the bulk and the urgent lane of
// one bucket of cfg's QPS and burst.
func laneConfigs(cfg *rest.Config) (bulk, urgent *rest.Config) {
	bulk, urgent = rest.CopyConfig(cfg), rest.CopyConfig(cfg)
	if cfg.RateLimiter != nil || cfg.QPS <= 0 {
		return bulk, urgent // the caller's limiter, shared as it is
	}
	l := newLanes(cfg.QPS, cfg.Burst)
	bulk.RateLimiter, urgent.RateLimiter = lane{l: l}, lane{l: l, urgent: true}
	return bulk, urgent
}
