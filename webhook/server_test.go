package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/metrics"
)

func testServer(t *testing.T) *Server {
	t.Helper()
	o := DefaultOptions()
	o.CertHosts = []string{"127.0.0.1"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: o, reviewer: guideReviewer(), certs: NewCerts(nil, o), metrics: metrics.New(), inFlight: make(chan struct{}, 4), large: largeSlot(),
		callers: newCallers(&o.CertOptions)}
	b, err := issue(nil, nil, time.Now(), time.Hour, time.Hour, o.dnsNames, o.ips)
	if err != nil {
		t.Fatal(err)
	}
	s.certs.load(logr.Discard(), b)
	return s
}

func TestHandler(t *testing.T) {
	s := testServer(t)
	valid := reviewOf(t, admissionv1.Delete, "ml-research", nil, nil, false)
	tests := map[string]struct {
		method, contentType string
		body                []byte
		status              int
		message             string
	}{
		"a review":          {http.MethodPost, "application/json", valid, 200, "ml-research still has children"},
		"GET":               {http.MethodGet, "", nil, 405, "method GET: POST an AdmissionReview"},
		"YAML":              {http.MethodPost, "application/yaml", valid, 415, `content type "application/yaml": send application/json`},
		"JSON with charset": {http.MethodPost, "application/json; charset=utf-8", valid, 200, "ml-research still has children"},
		"too large":         {http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MaxRequestBytes+1), 413, "larger than 3145728 bytes"},
		"not a review":      {http.MethodPost, "application/json", []byte("{"), 400, "not a JSON AdmissionReview"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, Path, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			var rev admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &rev); err != nil {
				t.Fatalf("the answer is not an AdmissionReview: %v: %s", err, rec.Body)
			}
			if rev.Response == nil || rev.Response.Allowed || !strings.Contains(rev.Response.Result.Message, tc.message) {
				t.Fatalf("answer %s, want a denial with %q", rec.Body, tc.message)
			}
		})
	}
}

// serving serves a test server with its real HTTPS server on loopback,
// and returns the pool of its CA.
func serving(t *testing.T) (*Server, net.Listener, *x509.CertPool) {
	t.Helper()
	s := testServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.httpServer()
	srv.ErrorLog = log.New(io.Discard, "", 0)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.certs.CABundle())
	return s, ln, pool
}

// TestTLS serves the handler with the server's TLS configuration: TLS 1.2
// and 1.3 clients that trust the CA get answers; a TLS 1.1 client does not.
func TestTLS(t *testing.T) {
	s, ln, pool := serving(t)
	client := func(minV, maxV uint16) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, MinVersion: minV, MaxVersion: maxV, ServerName: "ome-quota-manager-webhook.ome.svc"}}}
	}
	kept := client(tls.VersionTLS12, tls.VersionTLS13)
	postWith := func(c *http.Client) (*http.Response, error) {
		body := reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "40").Obj(), nil, false)
		return c.Post("https://"+ln.Addr().String()+Path, "application/json", bytes.NewReader(body))
	}
	post := func(minV, maxV uint16) (*http.Response, error) { return postWith(client(minV, maxV)) }
	resp, err := postWith(kept)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		resp, err := post(v, v)
		if err != nil {
			t.Fatalf("%s: %v", tls.VersionName(v), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "CapacityExceeded") {
			t.Errorf("%s: %d %s", tls.VersionName(v), resp.StatusCode, b)
		}
	}
	if _, err := post(tls.VersionTLS10, tls.VersionTLS11); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	// Without a certificate, the handshake fails: writes fail closed.
	s.certs.setMissing(logr.Discard())
	if _, err := post(tls.VersionTLS12, tls.VersionTLS13); err == nil {
		t.Error("served without a certificate")
	}
	// A connection made before is refused too, and closed. The refusal is
	// a denial that carries the cause and the fix, not a bare 503, which
	// kubectl would print as "the server is currently unable to handle
	// the request".
	resp, err = postWith(kept)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &rev); err != nil || rev.Response == nil || rev.Response.Result == nil {
		t.Fatalf("on a kept connection without a certificate: %d %s: not an AdmissionReview response (%v)", resp.StatusCode, b, err)
	}
	if r := rev.Response; resp.StatusCode != http.StatusOK || !resp.Close || r.Allowed || r.UID != "uid-1" || r.Result.Code != http.StatusServiceUnavailable ||
		!strings.Contains(r.Result.Message, "this replica of the quota manager is not ready, so it cannot judge the write: webhook: Secret ome/ome-quota-manager-webhook-cert does not exist") ||
		!strings.Contains(r.Result.Message, "To recover, recreate the Secret empty") {
		t.Errorf("on a kept connection without a certificate: %d (close %v) %s", resp.StatusCode, resp.Close, b)
	}
	if err := s.certs.Ready(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Ready without the Secret: %v", err)
	}
}

// The webhook speaks HTTP/1.1 only, even to a client that offers HTTP/2,
// and reviews sent one after another reuse one connection.
func TestServesHTTP1(t *testing.T) {
	_, ln, pool := serving(t)
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "ome-quota-manager-webhook.ome.svc"}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	for i := range 3 {
		reused := false
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { reused = c.Reused }})
		body := reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "40").Obj(), nil, false)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+ln.Addr().String()+Path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "CapacityExceeded") {
			t.Fatalf("review %d: %d %s", i, resp.StatusCode, b)
		}
		if resp.ProtoMajor != 1 {
			t.Errorf("review %d was served over %s, want HTTP/1.1", i, resp.Proto)
		}
		if i > 0 && !reused {
			t.Errorf("review %d opened a new connection", i)
		}
	}
}
