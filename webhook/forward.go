package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/klog/v2"
)

// forwardTimeout bounds one hand-over: the API server waits at most the
// configuration's timeoutSeconds (10 by default) for the whole review.
const forwardTimeout = 8 * time.Second

// forwarder hands writes to the holder of the admission term over HTTPS.
// It checks the holder's certificate against the CA the replicas share
// (the Secret's ca.crt), under the Service's DNS name, which every
// replica's serving certificate carries: the holder is dialled at its
// pod's address, which the certificate does not name.
type forwarder struct {
	certs      *Certs
	serverName string

	mu        sync.Mutex
	bundle    []byte
	transport *http.Transport
}

func (f *forwarder) client() (*http.Client, error) {
	bundle := f.certs.CABundle()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.transport == nil || !bytes.Equal(bundle, f.bundle) {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(bundle) {
			return nil, errors.New("no CA to check the holder's certificate against yet")
		}
		if f.transport != nil {
			f.transport.CloseIdleConnections()
		}
		f.bundle = bundle
		f.transport = &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: f.serverName, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	return &http.Client{Transport: f.transport, Timeout: forwardTimeout}, nil
}

// forward sends fw to the holder at address and returns its verdict.
func (f *forwarder) forward(ctx context.Context, address string, fw forwarded) (Verdict, error) {
	c, err := f.client()
	if err != nil {
		return Verdict{}, err
	}
	body, err := json.Marshal(fw)
	if err != nil {
		return Verdict{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+address+ForwardPath, bytes.NewReader(body))
	if err != nil {
		return Verdict{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return Verdict{}, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, MaxRequestBytes))
	if err != nil {
		return Verdict{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var v Verdict
		if err := json.Unmarshal(out, &v); err != nil {
			return Verdict{}, fmt.Errorf("the holder's answer does not decode: %w", err)
		}
		return v, nil
	case http.StatusConflict:
		return Verdict{}, errNotHolder
	default:
		return Verdict{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, clip(string(out)))
	}
}

// serveForwarded answers, as the holder of the term, a write another
// replica handed it: 200 and the verdict, 409 when this replica does not
// hold the term, 503 when it cannot judge now.
func (s *Server) serveForwarded(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !isJSON(r.Header.Get("Content-Type")) {
		http.Error(w, "POST a forwarded write as application/json", http.StatusBadRequest)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		http.Error(w, "reading the forwarded write: "+err.Error(), http.StatusBadRequest)
		return
	}
	// Amounts are checked for size before they are parsed, as in a
	// review: this port is open to whoever reaches a review's. Both
	// decodings match keys by case alike, so both read the same specs.
	var raw struct {
		Write struct {
			Spec stdjson.RawMessage `json:"Spec"`
			Old  stdjson.RawMessage `json:"Old"`
		} `json:"write"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		http.Error(w, "the forwarded write does not decode: "+clip(err.Error()), http.StatusBadRequest)
		return
	}
	for _, spec := range []stdjson.RawMessage{raw.Write.Spec, raw.Write.Old} {
		if err := checkAmounts(spec); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	var fw forwarded
	if err := json.Unmarshal(body, &fw); err != nil || fw.Write.Name == "" {
		http.Error(w, "the forwarded write does not decode, or names no node", http.StatusBadRequest)
		return
	}
	if !s.state.Synced() {
		http.Error(w, "the holder's state is still loading the cluster", http.StatusServiceUnavailable)
		return
	}
	v, err := s.record.JudgeForwarded(r.Context(), fw)
	switch {
	case errors.Is(err, errNotHolder):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		klog.FromContext(r.Context()).V(1).Info("a forwarded write was not judged", "from", clip(fw.From), "node", fw.Write.Name, "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	out, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
