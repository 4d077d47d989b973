package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

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
