package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// The null webhook admits a review over TLS that its CA verifies, echoes
// the uid, counts creates apart from the rest, and its configuration
// keeps the manager's webhook name under another configuration name.
func TestNullWebhook(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, err := startNull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(n.ca) {
		t.Fatal("the null webhook's CA is not PEM")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-` + op + `","operation":"` + op + `"}}`
		resp, err := client.Post(n.url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Response struct {
				UID     string `json:"uid"`
				Allowed bool   `json:"allowed"`
			} `json:"response"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		if err != nil || !out.Response.Allowed || out.Response.UID != "u-"+op {
			t.Fatalf("%s: got %+v (%v), want allowed with uid u-%s", op, out, err, op)
		}
	}
	if c, o := n.creates.Load(), n.others.Load(); c != 1 || o != 2 {
		t.Fatalf("counted %d creates and %d others, want 1 and 2", c, o)
	}
	path := "/validate-acceleratorquota"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{
		{Name: "w", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Path: &path}}}}}
	n.point(cfg)
	if cc := cfg.Webhooks[0].ClientConfig; cfg.Name != nullConfigName || cfg.Webhooks[0].Name != "w" || cc.Service != nil || *cc.URL != n.url || string(cc.CABundle) != string(n.ca) {
		t.Fatalf("point made %+v", cfg)
	}
}
