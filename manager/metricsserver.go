package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// secureMetrics wraps the /metrics handler in authentication and
// authorization delegated to the API server, as Kubernetes components do:
// the scraper's bearer token is checked with a TokenReview, and its right
// to get the non-resource URL /metrics with a SubjectAccessReview. Both
// answers are cached (a token for a minute; an allow for five minutes, a
// deny for 30 s), so a scrape every 15 s costs the API server a couple of
// requests a few times an hour.
func secureMetrics(ctx context.Context, cfg *rest.Config, h http.Handler) (http.Handler, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authentication and authorization: %w", err)
	}
	return filter(klog.FromContext(ctx).WithName("metrics"), h)
}

// metricsTLS is the metrics endpoint's TLS configuration: the tls.crt and
// tls.key of --metrics-cert-dir, reloaded when they change, or a
// self-signed certificate made in memory at start.
func metricsTLS(ctx context.Context, dir, addr string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if dir != "" {
		w, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("--metrics-cert-dir=%s: reading tls.crt and tls.key: %w", dir, err)
		}
		go func() {
			if err := w.Start(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "watching the metrics certificate", "dir", dir)
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
		return nil, fmt.Errorf("making a self-signed certificate for the metrics endpoint: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}
