package webhook

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Names fixed by the product (DECISIONS.md, Names).
const (
	// DefaultConfigName is the ValidatingWebhookConfiguration the chart ships.
	DefaultConfigName = "ome-quota-manager.ome.io"
	// WebhookName is the one webhook in it; kubectl names it in denials.
	WebhookName = "acceleratorquota.ome-quota-manager.validator"
	// DefaultCertSecret is the Secret that holds the CA and the serving
	// certificate. The manager fills it; it never creates it.
	DefaultCertSecret = "ome/ome-quota-manager-webhook-cert"
	// LegacyRecord is the ConfigMap, in the certificate Secret's
	// namespace, through which versions before the AdmissionLedger
	// serialized their admissions: it is fenced at start (FenceRecord).
	LegacyRecord = "ome-quota-manager-admissions"
	// DefaultService is the Service in front of the replicas' webhook port.
	DefaultService = "ome/ome-quota-manager-webhook"
	// DefaultPort is the port the webhook listens on.
	DefaultPort = 9443
	// Path is where the webhook answers AdmissionReviews.
	Path = "/validate-acceleratorquota"
)

// Secret keys. ca.key is kept so that any replica can issue the next
// serving certificate under the same CA.
const (
	KeyCACert  = "ca.crt"
	KeyCAKey   = "ca.key"
	KeyTLSCert = "tls.crt"
	KeyTLSKey  = "tls.key"
)

// Options are the webhook's flags, plus lifetimes that only tests change.
type Options struct {
	// Enabled serves the webhook (--webhook); off, nothing here runs.
	Enabled bool
	// Port is the HTTPS port (--webhook-port), on every interface.
	Port int
	// CertSecret is the Secret, as namespace/name (--webhook-cert-secret).
	CertSecret string
	// ConfigName is the ValidatingWebhookConfiguration that gets the CA
	// bundle (--webhook-config-name).
	ConfigName string
	// Service, as namespace/name, gives the certificate's DNS names
	// (--webhook-service).
	Service string
	// CertHosts are extra DNS names and IP addresses for the certificate
	// (--webhook-cert-hosts).
	CertHosts []string
	// Ledger is the AdmissionLedger through which replicas serialize their
	// admissions (--webhook-ledger). The manager creates it when missing.
	Ledger string
	// Identity names this replica in the ledger.
	Identity string
	// ReservationExpiry is how long a reservation that cannot be seen to
	// land is counted (--webhook-reservation-expiry).
	ReservationExpiry time.Duration
	// Patience is how long a review waits for related reservations to
	// settle before it weighs them as uncertain.
	Patience time.Duration
	// ClientCA is a PEM file of CAs; set, the webhook serves only clients
	// with a certificate one of them signed (--webhook-client-ca).
	ClientCA string
	// MaxInFlight bounds the reviews judged at once; more get 429
	// (--webhook-max-in-flight).
	MaxInFlight int

	// CALifetime and ServingLifetime are how long new certificates are
	// valid. A certificate is renewed once less than a third of its own
	// lifetime is left.
	CALifetime      time.Duration
	ServingLifetime time.Duration
	// CheckInterval is how often the certificates' age is checked, besides
	// every change of the Secret or the webhook configuration.
	CheckInterval time.Duration

	// Parsed forms, filled by Validate.
	secretNS, secretName   string
	serviceNS, serviceName string
	dnsNames               []string
	ips                    []net.IP
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() *Options {
	return &Options{
		Enabled:           true,
		Port:              DefaultPort,
		CertSecret:        DefaultCertSecret,
		ConfigName:        DefaultConfigName,
		Service:           DefaultService,
		Ledger:            "ome-quota-manager",
		ReservationExpiry: 75 * time.Second,
		Patience:          time.Second,
		MaxInFlight:       32,
		CALifetime:        10 * 365 * 24 * time.Hour,
		ServingLifetime:   365 * 24 * time.Hour,
		CheckInterval:     time.Hour,
	}
}

// AddFlags registers the webhook's flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "webhook", o.Enabled, "serve the validating admission webhook for AcceleratorQuotas; false runs without it (remove the ValidatingWebhookConfiguration too, or every write fails closed)")
	fs.IntVar(&o.Port, "webhook-port", o.Port, "HTTPS port of the webhook")
	fs.StringVar(&o.CertSecret, "webhook-cert-secret", o.CertSecret, "Secret (namespace/name; a bare name means $POD_NAMESPACE) that holds the webhook's CA and serving certificate; it must exist: the manager fills it but never creates it")
	fs.StringVar(&o.Ledger, "webhook-ledger", o.Ledger, "AdmissionLedger (cluster-scoped) through which the replicas reserve the tree writes they admit; the manager creates it when it is missing")
	fs.DurationVar(&o.ReservationExpiry, "webhook-reservation-expiry", o.ReservationExpiry, "how long a reserved write that is never seen to land is counted, from when a replica first saw it; it must exceed the API server's --request-timeout (60s by default), which ends every write admitted and not stored")
	fs.StringVar(&o.ClientCA, "webhook-client-ca", o.ClientCA, "PEM file of the CA that signs the API server's client certificate for webhooks (its admission configuration's kubeConfigFile); set, the webhook refuses every TLS client without such a certificate")
	fs.IntVar(&o.MaxInFlight, "webhook-max-in-flight", o.MaxInFlight, "reviews judged at once; more are answered 429 (retry)")
	fs.StringVar(&o.ConfigName, "webhook-config-name", o.ConfigName, "ValidatingWebhookConfiguration into whose webhooks the CA bundle is injected")
	fs.StringVar(&o.Service, "webhook-service", o.Service, "Service (namespace/name; a bare name means $POD_NAMESPACE) in front of the webhook: its DNS names go into the serving certificate")
	fs.StringSliceVar(&o.CertHosts, "webhook-cert-hosts", o.CertHosts, "extra DNS names and IP addresses for the serving certificate, e.g. 127.0.0.1 when the API server calls the webhook on loopback")
}

// Validate checks the options and fills the parsed forms. Each error names
// the flag. With the webhook off, nothing is checked.
func (o *Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	if o.Port < 1 || o.Port > 65535 {
		return fmt.Errorf("--webhook-port must be a port between 1 and 65535, got %d", o.Port)
	}
	var err error
	if o.secretNS, o.secretName, err = namespacedName("--webhook-cert-secret", o.CertSecret); err != nil {
		return err
	}
	if o.serviceNS, o.serviceName, err = namespacedName("--webhook-service", o.Service); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(o.Ledger); len(errs) > 0 {
		return fmt.Errorf("--webhook-ledger: %q is not an object name: %s", o.Ledger, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(o.serviceName); len(errs) > 0 {
		return fmt.Errorf("--webhook-service: %q is not a Service name: %s", o.serviceName, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(o.ConfigName); len(errs) > 0 {
		return fmt.Errorf("--webhook-config-name: %q is not an object name: %s", o.ConfigName, strings.Join(errs, "; "))
	}
	svc := o.serviceName + "." + o.serviceNS
	o.dnsNames = []string{svc + ".svc", o.serviceName, svc, svc + ".svc.cluster.local"}
	o.ips = nil
	for _, h := range o.CertHosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			o.ips = append(o.ips, ip)
			continue
		}
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return fmt.Errorf("--webhook-cert-hosts: %q is neither an IP address nor a DNS name: %s", h, strings.Join(errs, "; "))
		}
		o.dnsNames = append(o.dnsNames, h)
	}
	if o.CALifetime <= 0 || o.ServingLifetime <= 0 || o.CheckInterval <= 0 {
		return fmt.Errorf("the webhook's certificate lifetimes and check interval must be positive")
	}
	if o.ReservationExpiry < 30*time.Second {
		return fmt.Errorf("--webhook-reservation-expiry=%s: it must exceed the API server's --request-timeout (60s by default), and be at least 30s", o.ReservationExpiry)
	}
	if o.MaxInFlight < 1 {
		return fmt.Errorf("--webhook-max-in-flight=%d: at least 1 review must be judged at once", o.MaxInFlight)
	}
	if o.Patience <= 0 {
		return fmt.Errorf("the webhook's patience must be positive")
	}
	if o.ClientCA != "" {
		if _, err := o.clientCAs(); err != nil {
			return err
		}
	}
	return nil
}

// namespacedName splits namespace/name; a bare name takes $POD_NAMESPACE.
func namespacedName(flag, v string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok {
		ns, name = os.Getenv("POD_NAMESPACE"), v
		if ns == "" {
			return "", "", fmt.Errorf("%s=%q has no namespace and POD_NAMESPACE is not set: write it as namespace/name", flag, v)
		}
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", fmt.Errorf("%s: %q is not a namespace name: %s", flag, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("%s: %q is not an object name: %s", flag, name, strings.Join(errs, "; "))
	}
	return ns, name, nil
}

// clientCAs reads --webhook-client-ca.
func (o *Options) clientCAs() (*x509.CertPool, error) {
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
