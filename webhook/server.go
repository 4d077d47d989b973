package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// MaxRequestBytes bounds an AdmissionReview's size. The API server sends
// the object and the old object of an AcceleratorQuota, each at most the
// 1.5 MiB that etcd takes.
const MaxRequestBytes = 3 << 20

// StateReader is the manager's view of its state (*manager.Manager).
type StateReader interface {
	// Observe runs f with the current state under the reducer's lock and
	// returns a channel that is closed once the next event has been applied.
	Observe(f func(*state.State)) <-chan struct{}
	// Synced reports whether the state holds the cluster's objects, and
	// NotReady why the replica is not ready (nil when it is).
	Synced() bool
	NotReady() error
	// OnVerdict records the audit record of a verdict in the event stream.
	OnVerdict(ctx context.Context, node string, v *events.Verdict)
}

// Server is the webhook of one replica: the HTTPS server and the keeper
// of its certificate.
type Server struct {
	opts     *Options
	reviewer *Reviewer
	certs    *Certs
	metrics  *metrics.Metrics
	ledger   *Ledger
	inFlight chan struct{} // a slot per review judged at once
	callers  *callers
	large    chan []byte // the one slot for a body over largeBody bytes, with its buffer
	kube     kubernetes.Interface

	listening atomic.Bool

	probeMu  sync.Mutex
	probedOK []byte // the certificate a probe last found served
}

// New builds the webhook for validated options. It judges writes on st's
// tree, serialized through the AdmissionLedger (Ledger). m may be nil.
func New(opts *Options, cfg *rest.Config, st StateReader, m *metrics.Metrics) (*Server, error) {
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, err
	}
	quotas, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The reads that any review can cost (the object a base names, the
	// ledger as it is now) go through a client of their own, with a rate
	// of its own: forged reviews cannot spend the rate that reservations
	// are written with.
	checks, err := versioned.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	l := &Ledger{Client: quotas.OmeV1beta1().AdmissionLedgers(), Name: opts.Ledger, State: st, Identity: opts.Identity,
		Watch:  cache.NewListWatchFromClient(quotas.OmeV1beta1().RESTClient(), "admissionledgers", "", fields.OneTermEqualSelector("metadata.name", opts.Ledger)),
		Expiry: opts.ReservationExpiry, Reuse: opts.Timeout, Hold: opts.StandingHold, Now: clockOf(), Metrics: m,
		Objects: checks.OmeV1beta1().AcceleratorQuotas(), Reads: checks.OmeV1beta1().AdmissionLedgers(),
		Waiting: make(chan struct{}, maxWaiting(opts.MaxInFlight))}
	reviewer := &Reviewer{Judge: l.Judge, Synced: st.Synced, NotReady: st.NotReady, OnVerdict: st.OnVerdict, Planes: opts.ProjectionWriters,
		MayRelease: mayRelease(kube), Warn: usageWarnings(st)}
	callers := newCallers(&opts.CertOptions)
	reviewer.Authenticated = callers.on()
	return &Server{
		opts:     opts,
		reviewer: reviewer,
		certs:    NewCerts(kube, opts),
		metrics:  m,
		ledger:   l,
		inFlight: make(chan struct{}, opts.MaxInFlight),
		callers:  callers,
		large:    largeSlot(),
		kube:     kube,
	}, nil
}

// mayRelease asks the API server, with a SubjectAccessReview, whether a
// user may "release" the AcceleratorQuota named name.
func mayRelease(kube kubernetes.Interface) func(context.Context, authenticationv1.UserInfo, string) (bool, error) {
	return func(ctx context.Context, u authenticationv1.UserInfo, name string) (bool, error) {
		extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "release", Group: v1beta1.GroupName, Version: v1beta1.SchemeGroupVersion.Version,
				Resource: "acceleratorquotas", Name: name,
			},
		}}
		got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.Allowed, nil
	}
}

// clockOf is the admission path's clock: time.Now, shifted by
// $OME_QUOTA_MANAGER_CLOCK_SKEW (a duration) when set, which tests use to
// show that no decision compares one replica's clock with another's.
func clockOf() func() time.Time {
	skew, err := time.ParseDuration(os.Getenv("OME_QUOTA_MANAGER_CLOCK_SKEW"))
	if err != nil || skew == 0 {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(skew) }
}

// Run serves HTTPS on the webhook port and keeps the certificate, until
// ctx is done. It fails when the port cannot be bound.
func (s *Server) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("webhook")
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.opts.Port)))
	if err != nil {
		return fmt.Errorf("webhook: listening on port %d (--webhook-port): %w", s.opts.Port, err)
	}
	ln = netutil.LimitListener(ln, maxConns)
	srv := s.httpServer()
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	certsDone := make(chan error, 1)
	go func() { certsDone <- s.certs.Run(klog.NewContext(ctx, log)) }()
	go s.ledger.Run(ctx)
	go s.callers.run(klog.NewContext(ctx, log), s.kube)
	go s.runPolicyCheck(klog.NewContext(ctx, log))
	s.listening.Store(true)
	log.Info("serving the admission webhook", "port", s.opts.Port, "path", Path, "secret", s.opts.CertSecret, "config", s.opts.ConfigName,
		"ledger", s.opts.Ledger, "maxInFlight", s.opts.MaxInFlight)
	// Whether callers are authenticated, said once at start: in the log,
	// a metric, and the webhook configuration (kubectl ome quota status
	// root).
	callers := s.callers.describe(s.opts.Port)
	log.Info("the webhook's callers are "+callers, "authenticated", s.callers.on())
	if s.metrics != nil {
		s.metrics.WebhookCallersAuthenticated.Set(map[bool]float64{true: 1}[s.callers.on()])
	}
	go annotate(ctx, s.kube, s.opts.ConfigName, v1beta1.WebhookCallersAnnotation, reported(callers, s.opts.Identity, time.Now()))

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-served:
		runErr = fmt.Errorf("webhook: serving on port %d: %w", s.opts.Port, err)
	case err := <-certsDone:
		if err != nil {
			runErr = fmt.Errorf("webhook: keeping the certificate: %w", err)
		}
	}
	s.listening.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if ctx.Err() == nil && runErr == nil {
		runErr = errors.New("webhook: stopped unexpectedly")
	}
	return runErr
}

// Bounds on what callers can hold: connections open at once (each buffers
// at most MaxRequestBytes), and the size above which a body waits for the
// one slot of large bodies, so that a stream of huge forged reviews costs
// a quarter of one core at most (admit).
const (
	maxConns  = 256
	largeBody = 256 << 10
)

// Handler answers AdmissionReviews at Path.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Path, s.serveReview)
	return mux
}

func (s *Server) serveReview(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	log := klog.FromContext(r.Context())
	defer func() {
		// The last line of defence: Review does not panic (FuzzReview), but
		// a panic must never take the replica down with it.
		if p := recover(); p != nil {
			log.Error(fmt.Errorf("%v", p), "the admission handler panicked")
			http.Error(w, "internal error in the quota manager's webhook", http.StatusInternalServerError)
		}
	}()
	var res Result
	switch {
	case s.certs.Serving() != nil:
		res = s.refuseUncertified(w, r)
	case r.Method != http.MethodPost:
		res = badStatus("", http.StatusMethodNotAllowed, fmt.Sprintf("method %s: POST an AdmissionReview", r.Method))
	case !isJSON(r.Header.Get("Content-Type")):
		res = badStatus("", http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: send application/json", r.Header.Get("Content-Type")))
	default:
		res = s.admit(w, r)
	}
	if s.metrics != nil {
		s.metrics.WebhookVerdicts.WithLabelValues(res.Operation, res.Verdict).Inc()
	}
	defer func() {
		if s.metrics != nil {
			s.metrics.WebhookReviewSeconds.WithLabelValues(res.Verdict).Observe(time.Since(start).Seconds())
		}
		// A denial or a warning at level 1; every review at 2, where
		// test/cmd/webhookbench reads it with the "judged" line (same uid).
		resp, level, msg := res.Review.Response, 2, ""
		if resp.Result != nil {
			msg = resp.Result.Message
		}
		if !resp.Allowed || len(resp.Warnings) > 0 {
			level = 1
		}
		log.V(level).Info("reviewed", "uid", resp.UID, "operation", res.Operation, "verdict", res.Verdict,
			"message", msg, "warnings", resp.Warnings, "total", time.Since(start))
	}()
	out, err := json.Marshal(res.Review)
	if err != nil {
		http.Error(w, "encoding the AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.HTTPStatus)
	_, _ = w.Write(out)
}

// maxWaiting is how many of the reviews in flight may wait at once, for
// the replica's view or for related reservations to settle: a quarter,
// so that reviews that wait never hold every slot.
func maxWaiting(inFlight int) int { return max(1, inFlight/4) }

// admit reads and judges one review, within the bounds: a large body waits
// for the one large slot, a review past MaxInFlight is answered 429, and the
// judgement ends before the API server's own timeout for the call, and
// before the webhook's configured one whatever the call asks.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) Result {
	ctx, cancel := context.WithTimeout(r.Context(), judgeTimeout(r.URL.Query().Get("timeout"), s.opts.Timeout))
	defer cancel()
	var buf []byte
	if r.ContentLength < 0 || r.ContentLength > largeBody {
		select {
		case buf = <-s.large:
			// The slot is held three times as long again as the body
			// took, so that large bodies, forged or not, take at most a
			// quarter of one core, and are read into the slot's one
			// buffer: small reviews keep the rest, and the heap stays
			// small.
			t0 := time.Now()
			defer func() { time.AfterFunc(3*time.Since(t0), func() { s.large <- buf[:0] }) }()
			if buf == nil {
				buf = make([]byte, 0, MaxRequestBytes+bytes.MinRead)
			}
		case <-ctx.Done():
			return badStatus("", http.StatusTooManyRequests, "too many large AdmissionReviews at once: retry")
		}
	}
	body, err := readBody(w, r, buf)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return badStatus("", http.StatusRequestEntityTooLarge, fmt.Sprintf("the AdmissionReview is larger than %d bytes", MaxRequestBytes))
	case err != nil:
		return bad("", fmt.Sprintf("reading the request body: %v", err))
	}
	select {
	case s.inFlight <- struct{}{}:
		defer func() { <-s.inFlight }()
	default:
		res := s.reviewer.Refuse(body, fmt.Sprintf("this replica is judging %d writes already: retry in a moment", cap(s.inFlight)))
		if res.Review.Response.Result != nil {
			res.Review.Response.Result.Code = http.StatusTooManyRequests
			res.Review.Response.Result.Reason = metav1.StatusReasonTooManyRequests
		}
		return res
	}
	return s.reviewer.Review(ctx, body)
}

// judgeTimeout is how long a judgement may take: a little less than the
// API server waits for the call (the timeout it adds to the URL), so that
// it hears "retry" rather than a timeout; never longer than for own, the
// webhook's timeout (--webhook-timeout), which also applies when the URL
// names none or a longer one: a caller cannot buy a longer wait.
func judgeTimeout(q string, own time.Duration) time.Duration {
	d, err := time.ParseDuration(q)
	if err != nil || d <= 0 || d > own {
		d = own
	}
	return max(d*3/4, d-2*time.Second, 100*time.Millisecond)
}

// readBody reads the request's body, at most MaxRequestBytes, into buf when
// it has room (nothing decoded from the body keeps it).
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	defer body.Close()
	b := bytes.NewBuffer(buf[:0])
	_, err := b.ReadFrom(body)
	return b.Bytes(), err
}

// largeSlot is the slot of large bodies, free, its buffer not yet made.
func largeSlot() chan []byte {
	c := make(chan []byte, 1)
	c <- nil
	return c
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
