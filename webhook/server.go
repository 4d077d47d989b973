package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/api/client/clientset/versioned"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
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
	// View runs f with the current state under the reducer's lock.
	View(f func(*state.State))
	// Observe runs f like View and returns a channel that is closed once
	// the next event has been applied.
	Observe(f func(*state.State)) <-chan struct{}
	// Synced reports whether the state holds the cluster's objects.
	Synced() bool
}

// Server is the webhook of one replica: the HTTPS server and the keeper
// of its certificate.
type Server struct {
	opts     *Options
	reviewer *Reviewer
	certs    *Certs
	metrics  *metrics.Metrics
	record   *Serializer
	kube     kubernetes.Interface
	state    StateReader

	listening atomic.Bool

	probeMu  sync.Mutex
	probedOK []byte // the certificate a probe last found served
}

// New builds the webhook for validated options. It judges writes on st's
// tree, serialized through the admission record (Serializer), and reads a
// node from the API server through cfg only when a parent is missing from
// st. m may be nil.
func New(opts *Options, cfg *rest.Config, st StateReader, m *metrics.Metrics) (*Server, error) {
	// Protobuf for built-in kinds: the record's Update is on every
	// admission's path, and so is its encoding in the API server.
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, err
	}
	recordKube, err := kubernetes.NewForConfig(recordConfig(pcfg))
	if err != nil {
		return nil, err
	}
	quotas, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	aqs := quotas.OmeV1beta1().AcceleratorQuotas()
	id := opts.Identity
	if id == "" {
		// Unique per process: the holder of the admission term is known
		// by it, and a restarted process must not take its predecessor's
		// term for its own.
		host, _ := os.Hostname()
		id = host + "_" + string(uuid.NewUUID())
	}
	z := &Serializer{
		ConfigMaps: recordKube.CoreV1().ConfigMaps(opts.recordNS), Namespace: opts.recordNS, Name: opts.recordName,
		Get: func(ctx context.Context, name string) (*v1beta1.AcceleratorQuota, error) {
			return aqs.Get(ctx, name, metav1.GetOptions{})
		},
		State: st, Identity: id, Address: opts.PeerAddress, Now: time.Now, RecordTimings: opts.Record, Metrics: m,
	}
	certs := NewCerts(kube, opts)
	z.Forward = (&forwarder{certs: certs, serverName: opts.dnsNames[0]}).forward
	reviewer := &Reviewer{Judge: z.Judge, Synced: st.Synced}
	if nr, ok := st.(interface{ NotReady() error }); ok {
		reviewer.NotReady = nr.NotReady
	}
	if vr, ok := st.(interface {
		OnVerdict(context.Context, string, *events.Verdict)
	}); ok {
		reviewer.OnVerdict = vr.OnVerdict
	}
	return &Server{
		opts:     opts,
		reviewer: reviewer,
		certs:    certs,
		metrics:  m,
		record:   z,
		kube:     kube,
		state:    st,
	}, nil
}

// recordConfig is cfg for the client of the record's reads and Updates: the
// same credentials and limits, but a connection of its own. Every client
// built from one configuration shares one HTTP/2 connection to the API
// server, and the manager's carries every informer's watch stream and the
// applier's writes; the record's Update is on the path of every admission
// that can change a verdict, and need not wait in that connection's
// queues or behind its one reader. (A Dial, the operator's or ours, makes
// client-go build a transport for this client alone rather than reuse the
// shared one.)
func recordConfig(cfg *rest.Config) *rest.Config {
	rcfg := rest.CopyConfig(cfg)
	if rcfg.Dial == nil {
		rcfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return rcfg
}

// Certs is the server's certificate keeper.
func (s *Server) Certs() *Certs { return s.certs }

// Run serves HTTPS on the webhook port and keeps the certificate, until
// ctx is done. It fails when the port cannot be bound.
func (s *Server) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("webhook")
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.opts.Port)))
	if err != nil {
		return fmt.Errorf("webhook: listening on port %d (--webhook-port): %w", s.opts.Port, err)
	}
	srv := s.httpServer()
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	certsDone := make(chan error, 1)
	go func() { certsDone <- s.certs.Run(klog.NewContext(ctx, log)) }()
	// The term's own context: it ends with Run, on every path, and Run
	// waits for the term to be handed back.
	termCtx, endTerm := context.WithCancel(ctx)
	termDone := make(chan struct{})
	if s.record != nil {
		go s.record.Run(ctx, s.kube.CoreV1().RESTClient())
		go func() { defer close(termDone); s.record.RunTerm(klog.NewContext(termCtx, log)) }()
	} else {
		close(termDone)
	}
	s.listening.Store(true)
	log.Info("serving the admission webhook", "port", s.opts.Port, "path", Path, "secret", s.opts.CertSecret, "config", s.opts.ConfigName,
		"admissionTerm", s.opts.Record.Term, "peerAddress", s.opts.PeerAddress)

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
	// Hand the term back before the process ends, beside the shutdown of
	// the server (a review it still drains is refused the term), so that
	// the next holder need not wait it out.
	endTerm()
	_ = srv.Shutdown(sctx)
	<-termDone
	if ctx.Err() == nil && runErr == nil {
		runErr = errors.New("webhook: stopped unexpectedly")
	}
	return runErr
}

// httpServer is the HTTPS server of the webhook. It speaks HTTP/1.1 only:
// the API server then keeps a connection per review in flight (reviews of
// one write after another reuse one), and a review is read, judged and
// answered on its connection's goroutine. Over HTTP/2 each review crosses
// four goroutines (the frame reader, the connection's loop, the handler,
// the frame writer), and on a busy machine each hand-over can wait for a
// core: that wait is on every admitted write's path.
func (s *Server) httpServer() *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         s.tlsConfig(),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          klog.NewStandardLogger("WARNING"),
	}
}

// tlsConfig serves the current certificate, over TLS 1.2 or newer only.
func (s *Server) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.GetCertificate}
}

// Ready is nil once the webhook serves with a valid certificate whose CA
// is injected: the listener is up, the certificate is current, and a TLS
// handshake with the server, checked against the CA, succeeds.
func (s *Server) Ready() error {
	if !s.listening.Load() {
		return fmt.Errorf("webhook: not listening on port %d yet", s.opts.Port)
	}
	if err := s.certs.Ready(); err != nil {
		return err
	}
	return s.probe()
}

// probe dials the webhook on loopback and checks the certificate it
// serves against the CA bundle, once per certificate.
func (s *Server) probe() error {
	leaf, caPEM := s.certs.Leaf(), s.certs.CABundle()
	if leaf == nil {
		return errors.New("webhook: no serving certificate")
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if string(s.probedOK) == string(leaf.Raw) {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("webhook: the CA bundle holds no certificate")
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.Port)),
		&tls.Config{RootCAs: pool, ServerName: s.opts.dnsNames[0], MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("webhook: a TLS handshake with this replica's webhook failed: %w", err)
	}
	defer conn.Close()
	s.probedOK = conn.ConnectionState().PeerCertificates[0].Raw
	if string(s.probedOK) != string(leaf.Raw) {
		// The certificate changed between the read and the handshake.
		s.probedOK = nil
		return errors.New("webhook: the serving certificate is being replaced")
	}
	return nil
}

// Handler answers AdmissionReviews at Path.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Path, s.serveReview)
	mux.HandleFunc(ForwardPath, s.serveForwarded)
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
		// A connection made while there was a certificate outlives it:
		// refuse on it too, and close it, so that writes fail closed. The
		// refusal is an AdmissionReview with the cause and the fix: a bare
		// 503 reaches kubectl as "the server is currently unable to
		// handle the request".
		w.Header().Set("Connection", "close")
		cause := s.certs.Serving()
		res = badStatus("", http.StatusServiceUnavailable, cause.Error())
		if body, err := readBody(w, r); err == nil {
			res = s.reviewer.Refuse(body, notReady(cause))
		}
		res.Verdict = VerdictUnavailable
	case r.Method != http.MethodPost:
		res = badStatus("", http.StatusMethodNotAllowed, fmt.Sprintf("method %s: POST an AdmissionReview", r.Method))
	case !isJSON(r.Header.Get("Content-Type")):
		res = badStatus("", http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: send application/json", r.Header.Get("Content-Type")))
	default:
		body, err := readBody(w, r)
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			res = badStatus("", http.StatusRequestEntityTooLarge, fmt.Sprintf("the AdmissionReview is larger than %d bytes", MaxRequestBytes))
		case err != nil:
			res = bad("", fmt.Sprintf("reading the request body: %v", err))
		default:
			res = s.reviewer.Review(r.Context(), body)
		}
	}
	if s.metrics != nil {
		s.metrics.WebhookVerdicts.WithLabelValues(res.Operation, res.Verdict).Inc()
		defer func() {
			s.metrics.WebhookReviewSeconds.WithLabelValues(res.Verdict).Observe(time.Since(start).Seconds())
		}()
	}
	if v := log.V(2); v.Enabled() && res.Review != nil && res.Review.Response != nil {
		// With the "judged" line of a judged write (same uid), where a
		// review's time went: test/cmd/webhookbench reads both.
		defer func() {
			v.Info("reviewed", "uid", res.Review.Response.UID, "verdict", res.Verdict, "total", time.Since(start))
		}()
	}
	if resp := res.Review.Response; resp != nil && (!resp.Allowed || len(resp.Warnings) > 0) {
		msg := ""
		if resp.Result != nil {
			msg = resp.Result.Message
		}
		log.V(1).Info("admission", "uid", resp.UID, "operation", res.Operation, "verdict", res.Verdict, "message", msg, "warnings", resp.Warnings)
	}
	out, err := json.Marshal(res.Review)
	if err != nil {
		http.Error(w, "encoding the AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.HTTPStatus)
	_, _ = w.Write(out)
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	defer body.Close()
	return io.ReadAll(body)
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
