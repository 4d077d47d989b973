package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nullConfigName is the configuration that points the API server at the
// null webhook in place of the manager's.
const nullConfigName = "webhookbench-null"

// nullWebhook admits every review at once without reading more of it than
// its uid and operation: what the API server spends calling it is the
// floor under any webhook's figures on this machine. It serves like the
// manager's (HTTP/1.1, an ECDSA P-256 certificate, TLS 1.2 or newer).
type nullWebhook struct {
	url             string
	ca              []byte
	creates, others atomic.Int64
}

// startNull serves the null webhook on a free loopback port until ctx is
// done.
func startNull(ctx context.Context) (*nullWebhook, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := &nullWebhook{url: fmt.Sprintf("https://%s/validate", ln.Addr()), ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:   http.HandlerFunc(n.serve),
		Protocols: &protocols,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return n, nil
}

func (n *nullWebhook) serve(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Request struct {
			UID       types.UID             `json:"uid"`
			Operation admissionv1.Operation `json:"operation"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if in.Request.Operation == admissionv1.Create {
		n.creates.Add(1)
	} else {
		n.others.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"response": map[string]any{"uid": in.Request.UID, "allowed": true},
	})
}

// point turns the manager's configuration into one for the null webhook:
// the same webhook name and rules, another configuration name, its URL and
// CA.
func (n *nullWebhook) point(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) {
	cfg.Name = nullConfigName
	for i := range cfg.Webhooks {
		url := n.url
		cfg.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: n.ca}
	}
}
