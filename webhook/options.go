package webhook

import (
	"fmt"
	"net"
	"os"
	"strconv"
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
	// DefaultAdmissionRecord is the ConfigMap that serializes admissions
	// across replicas. The manager creates it when it is missing.
	DefaultAdmissionRecord = "ome/ome-quota-manager-admissions"
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
	// AdmissionRecord is the ConfigMap, as namespace/name, through which
	// replicas serialize their admissions (--webhook-admission-record).
	AdmissionRecord string
	// Identity names this replica in the record; empty means the hostname.
	Identity string
	// Record are the admission record's timings; Record.Term is
	// --webhook-admission-term.
	Record RecordTimings
	// PeerAddress is where the other replicas reach this one's webhook,
	// host:port (--webhook-peer-address); empty, this replica never holds
	// the admission term.
	PeerAddress string

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
	recordNS, recordName   string
	serviceNS, serviceName string
	dnsNames               []string
	ips                    []net.IP
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() *Options {
	return &Options{
		Enabled:         true,
		Port:            DefaultPort,
		CertSecret:      DefaultCertSecret,
		ConfigName:      DefaultConfigName,
		Service:         DefaultService,
		AdmissionRecord: DefaultAdmissionRecord,
		Record:          RecordTimings{Settle: 3 * time.Second, InFlight: 10 * time.Second, Keep: 30 * time.Second, Term: 10 * time.Second},
		CALifetime:      10 * 365 * 24 * time.Hour,
		ServingLifetime: 365 * 24 * time.Hour,
		CheckInterval:   time.Hour,
	}
}

// AddFlags registers the webhook's flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "webhook", o.Enabled, "serve the validating admission webhook for AcceleratorQuotas; false runs without it (remove the ValidatingWebhookConfiguration too, or every write fails closed)")
	fs.IntVar(&o.Port, "webhook-port", o.Port, "HTTPS port of the webhook")
	fs.StringVar(&o.CertSecret, "webhook-cert-secret", o.CertSecret, "Secret (namespace/name; a bare name means $POD_NAMESPACE) that holds the webhook's CA and serving certificate; it must exist: the manager fills it but never creates it")
	fs.StringVar(&o.AdmissionRecord, "webhook-admission-record", o.AdmissionRecord, "ConfigMap (namespace/name; a bare name means $POD_NAMESPACE) through which the replicas serialize the tree writes they admit; the manager creates it when it is missing")
	fs.StringVar(&o.ConfigName, "webhook-config-name", o.ConfigName, "ValidatingWebhookConfiguration into whose webhooks the CA bundle is injected")
	fs.StringVar(&o.Service, "webhook-service", o.Service, "Service (namespace/name; a bare name means $POD_NAMESPACE) in front of the webhook: its DNS names go into the serving certificate")
	fs.DurationVar(&o.Record.Term, "webhook-admission-term", o.Record.Term, "how long one replica holds the right to admit the tree writes of every replica, renewed every third of it (the others hand it their writes); 0 makes every admission write the admission record instead, one more apiserver write per admission")
	fs.StringVar(&o.PeerAddress, "webhook-peer-address", o.PeerAddress, "host:port at which the other replicas reach this replica's webhook while it holds the admission term; empty means $POD_IP and --webhook-port when POD_IP is set, else this replica never holds the term")
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
	if o.recordNS, o.recordName, err = namespacedName("--webhook-admission-record", o.AdmissionRecord); err != nil {
		return err
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
	if r := o.Record; r.Settle <= 0 || r.InFlight < r.Settle || r.Keep < r.InFlight {
		return fmt.Errorf("the admission record's timings must be positive, with settle <= in flight <= keep; got %+v", r)
	}
	if t := o.Record.Term; t != 0 && t < 3*time.Second {
		return fmt.Errorf("--webhook-admission-term=%s: a term must last at least 3s (it is renewed every third of it), or be 0 to write the record on every admission", t)
	}
	if o.PeerAddress == "" {
		if ip := os.Getenv("POD_IP"); ip != "" {
			o.PeerAddress = net.JoinHostPort(ip, strconv.Itoa(o.Port))
		}
	}
	if o.PeerAddress != "" {
		host, port, err := net.SplitHostPort(o.PeerAddress)
		if err != nil || host == "" {
			return fmt.Errorf("--webhook-peer-address=%q: write it as host:port, e.g. 10.0.0.7:%d (the pod's IP and --webhook-port)", o.PeerAddress, o.Port)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("--webhook-peer-address=%q: %q is not a port", o.PeerAddress, port)
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
