package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// ServingTLS is a TLS configuration for another HTTPS endpoint of the
// manager (its /metrics): the tls.crt and tls.key of dir, reloaded when
// they change, or, with dir empty, a self-signed certificate for addr's
// host made in memory at start. Certificate code lives in this package.
func ServingTLS(ctx context.Context, dir, addr string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if dir != "" {
		w, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("reading tls.crt and tls.key: %w", err)
		}
		go func() {
			if err := w.Start(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "watching a serving certificate", "dir", dir)
			}
		}()
		cfg.GetCertificate = w.GetCertificate
		return cfg, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		host = "localhost"
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("making a self-signed serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
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
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      35 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          klog.NewStandardLogger("WARNING"),
	}
}

// tlsConfig serves the current certificate, over TLS 1.2 or newer only.
func (s *Server) tlsConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.GetCertificate}
	if s.callers.on() {
		// The CA may change (a ConfigMap kept current), so the chain is
		// checked by callers, on the CA as it is at the handshake.
		c.ClientAuth, c.VerifyPeerCertificate = tls.RequireAnyClientCert, s.callers.verify
	}
	return c
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
	if err := s.callers.ready(); err != nil {
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

// clientCAs reads --webhook-client-ca.
func (o *CertOptions) clientCAs() (*x509.CertPool, error) {
	pem, err := os.ReadFile(o.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("--webhook-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--webhook-client-ca=%s holds no PEM certificate: give the CA that signs the API server's webhook client certificate", o.ClientCA)
	}
	return pool, nil
}

// refuseUncertified answers a review that arrives while there is no
// certificate to serve, on a connection made while there was one: it is
// refused with the cause and the fix (a bare 503 reaches kubectl as "the
// server is currently unable to handle the request"), and the connection
// is closed, so that writes fail closed.
func (s *Server) refuseUncertified(w http.ResponseWriter, r *http.Request) Result {
	w.Header().Set("Connection", "close")
	cause := s.certs.Serving()
	res := badStatus("", http.StatusServiceUnavailable, cause.Error())
	if body, err := readBody(w, r, nil); err == nil {
		res = s.reviewer.Refuse(body, notReady(cause))
	}
	res.Verdict = VerdictUnavailable
	return res
}
