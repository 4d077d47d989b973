package webhook

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Names fixed by the product (DECISIONS.md, Names).
const (
	// WebhookName is the one webhook in the ValidatingWebhookConfiguration;
	// kubectl names it in denials.
	WebhookName = "acceleratorquota.ome-quota-manager.validator"
	// DefaultPort is the port the webhook listens on.
	DefaultPort = 9443
	// Path is where the webhook answers AdmissionReviews.
	Path = "/validate-acceleratorquota"
)

// Options are the webhook's flags, plus settings that only tests change.
type Options struct {
	// Enabled serves the webhook (--webhook); off, nothing here runs.
	Enabled bool
	// Port is the HTTPS port (--webhook-port), on every interface.
	Port int
	// Ledger is the AdmissionLedger through which replicas serialize their
	// admissions (--webhook-ledger). The manager creates it when missing.
	Ledger string
	// Identity names this replica in the ledger.
	Identity string
	// ReservationExpiry is how long a reservation that cannot be seen to
	// land is counted (--webhook-reservation-expiry). It must be at least
	// RequestTimeout plus Timeout (Validate).
	ReservationExpiry time.Duration
	// RequestTimeout is the API server's --request-timeout, which ends
	// every request, an admitted write that was not stored included
	// (--apiserver-request-timeout).
	RequestTimeout time.Duration
	// Timeout is the webhook's timeoutSeconds in the
	// ValidatingWebhookConfiguration (--webhook-timeout); a standing
	// reservation admits writes for that long after it is written.
	Timeout time.Duration
	// StandingHold is how long a standing reservation outlives its last
	// write (--webhook-standing-hold).
	StandingHold time.Duration
	// MaxInFlight bounds the reviews judged at once; more get 429
	// (--webhook-max-in-flight).
	MaxInFlight int
	// ProjectionWriters are the identities of the management plane that
	// may write its copies here (--webhook-projection-writers): user
	// names, and groups as group:NAME.
	ProjectionWriters []string
	// NetworkPolicy is the NetworkPolicy (namespace/name) that admits the
	// API server to the webhook port, compared with the API server's
	// addresses (--webhook-network-policy); "": none is compared.
	NetworkPolicy string

	// CertOptions are the certificate's and TLS's (bootstrap.go).
	CertOptions
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() *Options {
	return &Options{
		Enabled:           true,
		Port:              DefaultPort,
		Ledger:            "ome-quota-manager",
		ReservationExpiry: 75 * time.Second,
		RequestTimeout:    60 * time.Second,
		Timeout:           10 * time.Second,
		StandingHold:      2 * time.Second,
		MaxInFlight:       32,
		CertOptions:       defaultCertOptions(),
	}
}

// AddFlags registers the webhook's flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "webhook", o.Enabled, "serve the validating admission webhook for AcceleratorQuotas; false runs without it (remove the ValidatingWebhookConfiguration too, or every write fails closed)")
	fs.IntVar(&o.Port, "webhook-port", o.Port, "HTTPS port of the webhook")
	fs.StringVar(&o.Ledger, "webhook-ledger", o.Ledger, "AdmissionLedger (cluster-scoped) through which the replicas reserve the tree writes they admit; the manager creates it when it is missing")
	fs.DurationVar(&o.ReservationExpiry, "webhook-reservation-expiry", o.ReservationExpiry, "how long a reserved write that is never seen to land is counted, from when a replica first saw it; at least --apiserver-request-timeout plus --webhook-timeout")
	fs.DurationVar(&o.RequestTimeout, "apiserver-request-timeout", o.RequestTimeout, "the API server's --request-timeout, which ends every write admitted and not stored; set it to the API server's if you changed that")
	fs.DurationVar(&o.Timeout, "webhook-timeout", o.Timeout, "the webhook's timeoutSeconds in the ValidatingWebhookConfiguration (the chart's quotaManager.webhook.timeoutSeconds), at most 30s; a standing reservation admits writes for that long after it is written")
	fs.DurationVar(&o.StandingHold, "webhook-standing-hold", o.StandingHold, "how long a standing reservation (a team's raised budget) is kept after the last write it admitted: longer saves ledger writes for a budget raised again and again, shorter lets siblings past the raise sooner")
	fs.IntVar(&o.MaxInFlight, "webhook-max-in-flight", o.MaxInFlight, "reviews judged at once; more are answered 429 (retry)")
	fs.StringSliceVar(&o.ProjectionWriters, "webhook-projection-writers", o.ProjectionWriters, "identities of the management plane that alone may write the copies it projects here (labelled ome.io/quota-origin): user names, groups as group:NAME")
	fs.StringVar(&o.NetworkPolicy, "webhook-network-policy", o.NetworkPolicy, "NetworkPolicy (namespace/name) that admits the API server to the webhook port: its sources are compared with the API server's addresses every minute (ome_quota_webhook_policy_apiservers_outside); empty compares nothing")
	o.CertOptions.addFlags(fs)
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
	if errs := validation.IsDNS1123Subdomain(o.Ledger); len(errs) > 0 {
		return fmt.Errorf("--webhook-ledger: %q is not an object name: %s", o.Ledger, strings.Join(errs, "; "))
	}
	if o.RequestTimeout <= 0 {
		return fmt.Errorf("--apiserver-request-timeout=%s: it must be positive: the API server's --request-timeout (60s by default)", o.RequestTimeout)
	}
	if o.Timeout < time.Second || o.Timeout > 30*time.Second {
		return fmt.Errorf("--webhook-timeout=%s: the API server waits at most 30s, and at least 1s, for a webhook: set it to the configuration's timeoutSeconds", o.Timeout)
	}
	// A write admitted now lands, if ever, before its request ends; a
	// standing reservation admits writes for Timeout after it is
	// written. So each must be counted that long (docs/webhook.md).
	if least := o.RequestTimeout + o.Timeout; o.ReservationExpiry < least {
		return fmt.Errorf("--webhook-reservation-expiry=%s is shorter than %s, the least that keeps admission safe: the API server's request timeout (--apiserver-request-timeout=%s) plus the webhook's timeout (--webhook-timeout=%s); raise it, or set those two flags to what the API server and the ValidatingWebhookConfiguration use",
			o.ReservationExpiry, least, o.RequestTimeout, o.Timeout)
	}
	if o.MaxInFlight < 1 {
		return fmt.Errorf("--webhook-max-in-flight=%d: at least 1 review must be judged at once", o.MaxInFlight)
	}
	if o.StandingHold <= 0 {
		return fmt.Errorf("--webhook-standing-hold=%s: it must be positive", o.StandingHold)
	}
	if o.NetworkPolicy != "" {
		if _, _, err := namespacedName("--webhook-network-policy", o.NetworkPolicy); err != nil {
			return err
		}
	}
	return o.CertOptions.validate()
}
