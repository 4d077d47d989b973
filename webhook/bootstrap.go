package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/api/v1beta1"
)

// FieldManager names the webhook's writes (the Secret, the CA bundle).
const FieldManager = "ome-quota-manager-webhook"

// maxConflicts bounds the retries of one write that keeps conflicting.
const maxConflicts = 5

// Certs keeps one replica's serving certificate in step with the Secret,
// which is the source of truth for every replica:
//
//   - it reads the Secret and serves the certificate in it when that is
//     valid for the required names and not due for renewal;
//   - otherwise it issues one (under the Secret's CA when that can still
//     sign) and writes it with an Update that carries the Secret's
//     resourceVersion; when another replica wrote first, the Update
//     conflicts, and it re-reads and serves what the other one wrote;
//   - it never creates the Secret: while it is missing there is no
//     certificate, the TLS handshake fails, and Ready says how to recover;
//   - it watches the Secret and the ValidatingWebhookConfiguration, so a
//     changed Secret is served at once and a reset CA bundle is put back;
//   - it checks the certificates' age every CheckInterval and renews them
//     once less than a third of their lifetime is left.
type Certs struct {
	opts *Options
	kube kubernetes.Interface
	now  func() time.Time

	mu      sync.RWMutex
	current *bundle
	// problem is why there is no current bundle.
	problem error
	// injectErr is nil once the configuration carries current's CA
	// bundle, or does not exist.
	injectErr error
	// missingLogged and noConfigLogged keep a standing condition to one
	// log line.
	missingLogged, noConfigLogged bool

	kick chan struct{}
}

// NewCerts returns the certificate keeper for validated options.
func NewCerts(kube kubernetes.Interface, opts *Options) *Certs {
	return &Certs{
		opts: opts, kube: kube, now: time.Now,
		problem: fmt.Errorf("webhook: no serving certificate yet: reading Secret %s/%s", opts.secretNS, opts.secretName),
		kick:    make(chan struct{}, 1),
	}
}

// GetCertificate serves the current certificate; without one the TLS
// handshake fails, so the API server's call fails and the write fails
// closed.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current == nil {
		return nil, c.problem
	}
	return &c.current.serving, nil
}

// Serving is nil while there is a certificate to serve, else why not.
func (c *Certs) Serving() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current == nil {
		return c.problem
	}
	return nil
}

// CABundle is the PEM CA bundle of the current certificate, nil without
// one.
func (c *Certs) CABundle() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current == nil {
		return nil
	}
	return c.current.caPEM
}

// Leaf is the current serving certificate, nil without one.
func (c *Certs) Leaf() *x509.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current == nil {
		return nil
	}
	return c.current.leaf()
}

// Ready is nil once there is an unexpired serving certificate and its CA
// is in every webhook of the configuration (or the configuration does not
// exist); otherwise it says what is missing and what to do.
func (c *Certs) Ready() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current == nil {
		return c.problem
	}
	if leaf := c.current.leaf(); !c.now().Before(leaf.NotAfter) {
		return fmt.Errorf("webhook: the serving certificate expired at %s and could not be renewed: see the log", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return c.injectErr
}

func (c *Certs) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func byName(name string) informers.SharedInformerOption {
	return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
}

// Run keeps the certificate until ctx is done.
func (c *Certs) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("webhook-certs")
	o := c.opts
	sf := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithNamespace(o.secretNS), byName(o.secretName))
	vf := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, byName(o.ConfigName))
	secrets := sf.Core().V1().Secrets()
	configs := vf.Admissionregistration().V1().ValidatingWebhookConfigurations()
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.trigger() },
		UpdateFunc: func(any, any) { c.trigger() },
		DeleteFunc: func(any) { c.trigger() },
	}
	if _, err := secrets.Informer().AddEventHandler(kick); err != nil {
		return err
	}
	if _, err := configs.Informer().AddEventHandler(kick); err != nil {
		return err
	}
	sf.Start(ctx.Done())
	vf.Start(ctx.Done())
	defer sf.Shutdown()
	defer vf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), secrets.Informer().HasSynced, configs.Informer().HasSynced) {
		return nil
	}
	c.trigger()
	tick := time.NewTicker(o.CheckInterval)
	defer tick.Stop()
	backoff := time.Second
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-tick.C:
		case <-retry:
		}
		retry = nil
		if err := c.reconcile(ctx, log, secrets.Lister(), configs.Lister()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error(err, "keeping the webhook's certificate failed; retrying", "in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
}

// reconcile brings the served certificate, the Secret and the CA bundle in
// line.
func (c *Certs) reconcile(ctx context.Context, log logr.Logger, sl corelisters.SecretLister, vl admissionlisters.ValidatingWebhookConfigurationLister) error {
	o := c.opts
	sec, err := sl.Secrets(o.secretNS).Get(o.secretName)
	if apierrors.IsNotFound(err) {
		c.setMissing(log)
		return nil
	}
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		now := c.now()
		b, why := parseBundle(sec.Data)
		if why == nil {
			why = b.usable(now, o.dnsNames, o.ips)
		}
		if why == nil {
			c.load(log, b)
			if why = b.due(now); why == nil {
				break
			}
		}
		// Reuse the Secret's CA when it can still sign; keep its certificate
		// in the bundle beside a new one otherwise.
		prevCAs, prevKey, caErr := parseCA(sec.Data)
		if caErr != nil {
			prevCAs, prevKey = nil, nil
		}
		nb, err := issue(prevCAs, prevKey, now, o.CALifetime, o.ServingLifetime, o.dnsNames, o.ips)
		if err != nil {
			return fmt.Errorf("issuing the webhook's certificate: %w", err)
		}
		if !ours(sec.Labels) {
			err := notOurs("Secret", o.CertSecret, fmt.Sprintf("kubectl label secret -n %s %s %s=%s", o.secretNS, o.secretName, v1beta1.ManagedByLabel, v1beta1.ManagedByValue))
			c.mu.Lock()
			if c.current == nil {
				c.problem = err
			}
			c.mu.Unlock()
			return err
		}
		upd := sec.DeepCopy()
		if upd.Data == nil {
			upd.Data = map[string][]byte{}
		}
		maps.Copy(upd.Data, nb.data())
		_, err = c.kube.CoreV1().Secrets(o.secretNS).Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		if err == nil {
			log.Info("wrote a new webhook certificate to the Secret", "secret", o.CertSecret, "why", why.Error(),
				"notAfter", nb.leaf().NotAfter.UTC().Format(time.RFC3339), "caRenewed", len(prevCAs) == 0 || !nb.caCerts[0].Equal(prevCAs[0]))
			c.load(log, nb)
			break
		}
		if apierrors.IsConflict(err) && attempt < maxConflicts {
			// Another replica wrote first: serve what it wrote.
			sec, err = c.kube.CoreV1().Secrets(o.secretNS).Get(ctx, o.secretName, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			c.setMissing(log)
			return nil
		}
		if err != nil {
			return fmt.Errorf("writing the webhook's certificate to Secret %s: %w", o.CertSecret, err)
		}
	}
	return c.inject(ctx, log, vl)
}

func (c *Certs) load(log logr.Logger, b *bundle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	same := c.current != nil && string(c.current.certPEM) == string(b.certPEM) && string(c.current.caPEM) == string(b.caPEM) &&
		string(c.current.keyPEM) == string(b.keyPEM)
	if same {
		return
	}
	c.current, c.problem = b, nil
	c.missingLogged = false
	c.injectErr = fmt.Errorf("webhook: the CA bundle is not yet in ValidatingWebhookConfiguration %s", c.opts.ConfigName)
	log.Info("serving a webhook certificate", "secret", c.opts.CertSecret, "serial", b.leaf().SerialNumber.Text(16),
		"notAfter", b.leaf().NotAfter.UTC().Format(time.RFC3339), "dnsNames", b.leaf().DNSNames, "ips", b.leaf().IPAddresses)
}

func (c *Certs) setMissing(log logr.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current = nil
	c.problem = fmt.Errorf("webhook: Secret %s does not exist. The quota manager fills this Secret but never creates it, "+
		"so the webhook has no certificate, this replica is not ready and AcceleratorQuota writes fail closed. "+
		"To recover, recreate the Secret empty (upgrade the chart with quotaManager.webhook.enabled: true, which recreates it), "+
		"or disable the webhook (quotaManager.webhook.enabled: false, which removes the ValidatingWebhookConfiguration and runs the manager with --webhook=false)",
		c.opts.CertSecret)
	if !c.missingLogged {
		c.missingLogged = true
		log.Error(c.problem, "the webhook cannot serve")
	}
}

func (c *Certs) setInjected(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.injectErr = err
}

// inject puts the current CA bundle into every webhook of the
// configuration, unless they all carry it already.
func (c *Certs) inject(ctx context.Context, log logr.Logger, vl admissionlisters.ValidatingWebhookConfigurationLister) error {
	want := c.CABundle()
	if want == nil {
		return nil
	}
	name := c.opts.ConfigName
	cfg, err := vl.Get(name)
	for attempt := 0; ; attempt++ {
		if apierrors.IsNotFound(err) {
			c.mu.Lock()
			if !c.noConfigLogged {
				c.noConfigLogged = true
				log.Info("the ValidatingWebhookConfiguration does not exist, so the API server does not call this webhook; its CA bundle is injected once it appears", "name", name)
			}
			c.injectErr = nil
			c.mu.Unlock()
			return nil
		}
		if err != nil {
			c.setInjected(fmt.Errorf("webhook: cannot read ValidatingWebhookConfiguration %s to inject the CA bundle: %w", name, err))
			return err
		}
		c.mu.Lock()
		c.noConfigLogged = false
		c.mu.Unlock()
		if carries(cfg, want) {
			c.setInjected(nil)
			return nil
		}
		if !ours(cfg.Labels) {
			err := notOurs("ValidatingWebhookConfiguration", name, fmt.Sprintf("kubectl label validatingwebhookconfiguration %s %s=%s", name, v1beta1.ManagedByLabel, v1beta1.ManagedByValue))
			c.setInjected(err)
			return err
		}
		upd := cfg.DeepCopy()
		for i := range upd.Webhooks {
			upd.Webhooks[i].ClientConfig.CABundle = want
		}
		_, err = c.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		if err == nil {
			log.Info("injected the CA bundle into the ValidatingWebhookConfiguration", "name", name, "webhooks", len(upd.Webhooks))
			c.setInjected(nil)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= maxConflicts {
			c.setInjected(fmt.Errorf("webhook: cannot inject the CA bundle into ValidatingWebhookConfiguration %s: %w", name, err))
			return err
		}
		cfg, err = c.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	}
}

func carries(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte) bool {
	for _, w := range cfg.Webhooks {
		if string(w.ClientConfig.CABundle) != string(bundle) {
			return false
		}
	}
	return true
}

// ours reports whether an object carries the manager's label: the manager
// only ever writes objects that do.
func ours(labels map[string]string) bool {
	return labels[v1beta1.ManagedByLabel] == v1beta1.ManagedByValue
}

func notOurs(kind, name, fix string) error {
	return fmt.Errorf("webhook: %s %s lacks the label %s=%s, and the quota manager only writes objects that carry it, "+
		"so it cannot put the webhook's certificate there: add the label (%s), or recreate the object from the chart, which sets it",
		kind, name, v1beta1.ManagedByLabel, v1beta1.ManagedByValue, fix)
}

// Names fixed by the product (DECISIONS.md, Names).
const (
	// DefaultConfigName is the ValidatingWebhookConfiguration the chart ships.
	DefaultConfigName = "ome-quota-manager.ome.io"
	// DefaultCertSecret is the Secret that holds the CA and the serving
	// certificate. The manager fills it; it never creates it.
	DefaultCertSecret = "ome/ome-quota-manager-webhook-cert"
	// DefaultService is the Service in front of the replicas' webhook port.
	DefaultService = "ome/ome-quota-manager-webhook"
)

// Secret keys. ca.key is kept so that any replica can issue the next
// serving certificate under the same CA.
const (
	KeyCACert  = "ca.crt"
	KeyCAKey   = "ca.key"
	KeyTLSCert = "tls.crt"
	KeyTLSKey  = "tls.key"
)

// CertOptions are the flags of the certificate keeper and of TLS.
type CertOptions struct {
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
	// ClientCA is a PEM file of CAs; set, the webhook serves only clients
	// with a certificate one of them signed (--webhook-client-ca).
	ClientCA string
	// ClientCAConfigMap is where else to read those CAs:
	// namespace/name:key of a ConfigMap, such as the API server's own
	// client CA in kube-system/extension-apiserver-authentication,
	// client-ca-file (--webhook-client-ca-configmap); kept current.
	ClientCAConfigMap string
	// ClientNames, when set, are the common names a client certificate
	// must carry besides (--webhook-client-names).
	ClientNames []string

	// CALifetime and ServingLifetime are how long new certificates are
	// valid. A certificate is renewed once less than a third of its own
	// lifetime is left.
	CALifetime      time.Duration
	ServingLifetime time.Duration
	// CheckInterval is how often the certificates' age is checked, besides
	// every change of the Secret or the webhook configuration.
	CheckInterval time.Duration

	// Parsed forms, filled by validate.
	secretNS, secretName   string
	serviceNS, serviceName string
	caNS, caName, caKey    string
	dnsNames               []string
	ips                    []net.IP
}

func defaultCertOptions() CertOptions {
	return CertOptions{
		CertSecret:      DefaultCertSecret,
		ConfigName:      DefaultConfigName,
		Service:         DefaultService,
		CALifetime:      10 * 365 * 24 * time.Hour,
		ServingLifetime: 365 * 24 * time.Hour,
		CheckInterval:   time.Hour,
	}
}

func (o *CertOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CertSecret, "webhook-cert-secret", o.CertSecret, "Secret (namespace/name; a bare name means $POD_NAMESPACE) that holds the webhook's CA and serving certificate; it must exist: the manager fills it but never creates it")
	fs.StringVar(&o.ClientCA, "webhook-client-ca", o.ClientCA, "PEM file of the CA that signs the API server's client certificate for webhooks (its admission configuration's kubeConfigFile); set, the webhook refuses every TLS client without such a certificate")
	fs.StringVar(&o.ClientCAConfigMap, "webhook-client-ca-configmap", o.ClientCAConfigMap, "namespace/name:key of a ConfigMap holding the PEM CA that signs the API server's client certificate for webhooks, read and kept current in place of --webhook-client-ca; kube-system/extension-apiserver-authentication:client-ca-file is the API server's own client CA")
	fs.StringSliceVar(&o.ClientNames, "webhook-client-names", o.ClientNames, "with a client CA, the common names a client certificate must carry (kubeadm's for the API server: kube-apiserver-kubelet-client); none: any the CA signed")
	fs.StringVar(&o.ConfigName, "webhook-config-name", o.ConfigName, "ValidatingWebhookConfiguration into whose webhooks the CA bundle is injected")
	fs.StringVar(&o.Service, "webhook-service", o.Service, "Service (namespace/name; a bare name means $POD_NAMESPACE) in front of the webhook: its DNS names go into the serving certificate")
	fs.StringSliceVar(&o.CertHosts, "webhook-cert-hosts", o.CertHosts, "extra DNS names and IP addresses for the serving certificate, e.g. 127.0.0.1 when the API server calls the webhook on loopback")
}

func (o *CertOptions) validate() error {
	var err error
	if o.secretNS, o.secretName, err = namespacedName("--webhook-cert-secret", o.CertSecret); err != nil {
		return err
	}
	if o.serviceNS, o.serviceName, err = namespacedName("--webhook-service", o.Service); err != nil {
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
	if o.ClientCA != "" {
		if _, err := o.clientCAs(); err != nil {
			return err
		}
	}
	if o.ClientCAConfigMap != "" {
		if o.ClientCA != "" {
			return fmt.Errorf("--webhook-client-ca and --webhook-client-ca-configmap are both set: give the API server's client CA one way")
		}
		ref, key, ok := strings.Cut(o.ClientCAConfigMap, ":")
		if !ok || key == "" || !strings.Contains(ref, "/") {
			return fmt.Errorf("--webhook-client-ca-configmap=%q: write it as namespace/name:key, e.g. kube-system/extension-apiserver-authentication:client-ca-file", o.ClientCAConfigMap)
		}
		if o.caNS, o.caName, err = namespacedName("--webhook-client-ca-configmap", ref); err != nil {
			return err
		}
		o.caKey = key
	}
	if len(o.ClientNames) > 0 && o.ClientCA == "" && o.ClientCAConfigMap == "" {
		return fmt.Errorf("--webhook-client-names is set without a client CA: set --webhook-client-ca or --webhook-client-ca-configmap too")
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
