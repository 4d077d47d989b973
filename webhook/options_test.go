package webhook

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/test/flagtest"
)

func TestOptionsDefaults(t *testing.T) {
	o := DefaultOptions()
	if err := flagtest.Validate(t, o, "--webhook-cert-hosts=127.0.0.1,webhook.example"); err != nil {
		t.Fatal(err)
	}
	if !o.Enabled || o.Port != 9443 || o.ConfigName != "ome-quota-manager.ome.io" {
		t.Errorf("defaults: %+v", o)
	}
	if o.secretNS != "ome" || o.secretName != "ome-quota-manager-webhook-cert" {
		t.Errorf("secret %s/%s", o.secretNS, o.secretName)
	}
	if o.Ledger != "ome-quota-manager" || o.ReservationExpiry.Seconds() != 75 || o.MaxInFlight != 32 {
		t.Errorf("ledger %s, expiry %s, in flight %d", o.Ledger, o.ReservationExpiry, o.MaxInFlight)
	}
	want := []string{"ome-quota-manager-webhook.ome.svc", "ome-quota-manager-webhook", "ome-quota-manager-webhook.ome",
		"ome-quota-manager-webhook.ome.svc.cluster.local", "webhook.example"}
	if d := cmp.Diff(want, o.dnsNames); d != "" {
		t.Errorf("DNS names (-want +got):\n%s", d)
	}
	if len(o.ips) != 1 || !o.ips[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IPs %v", o.ips)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := map[string]struct {
		args   []string
		podNS  string
		errHas string // "" means valid
	}{
		"off checks nothing":            {args: []string{"--webhook=false", "--webhook-port=0"}},
		"port 0":                        {args: []string{"--webhook-port=0"}, errHas: "--webhook-port must be a port between 1 and 65535, got 0"},
		"port too large":                {args: []string{"--webhook-port=70000"}, errHas: "--webhook-port"},
		"secret without namespace":      {args: []string{"--webhook-cert-secret=cert"}, errHas: `--webhook-cert-secret="cert" has no namespace and POD_NAMESPACE is not set`},
		"secret in the pod's namespace": {args: []string{"--webhook-cert-secret=cert"}, podNS: "quota"},
		"bad secret name":               {args: []string{"--webhook-cert-secret=ome/Cert"}, errHas: `--webhook-cert-secret: "Cert" is not an object name`},
		"bad service namespace":         {args: []string{"--webhook-service=O_O/svc"}, errHas: `--webhook-service: "O_O" is not a namespace name`},
		"dotted service name":           {args: []string{"--webhook-service=ome/a.b"}, errHas: `--webhook-service: "a.b" is not a Service name`},
		"bad configuration name":        {args: []string{"--webhook-config-name=Not OK"}, errHas: "--webhook-config-name"},
		"bad host":                      {args: []string{"--webhook-cert-hosts=127.0.0.1,not a host"}, errHas: `--webhook-cert-hosts: "not a host" is neither an IP address nor a DNS name`},
		"IPv6 host":                     {args: []string{"--webhook-cert-hosts=::1"}},
		"bad ledger":                    {args: []string{"--webhook-ledger=Ledger"}, errHas: `--webhook-ledger: "Ledger" is not an object name`},
		"short expiry":                  {args: []string{"--webhook-reservation-expiry=10s"}, errHas: "--webhook-reservation-expiry=10s is shorter than 1m10s"},
		// Safety rests on the expiry outliving every admitted write: the
		// API server's request timeout plus the webhook's timeout.
		"expiry below the timeouts": {args: []string{"--webhook-reservation-expiry=69s"},
			errHas: "--webhook-reservation-expiry=1m9s is shorter than 1m10s, the least that keeps admission safe: the API server's request timeout (--apiserver-request-timeout=1m0s) plus the webhook's timeout (--webhook-timeout=10s)"},
		"expiry at the timeouts":   {args: []string{"--webhook-reservation-expiry=70s"}},
		"a longer request timeout": {args: []string{"--apiserver-request-timeout=2m"}, errHas: "--webhook-reservation-expiry=1m15s is shorter than 2m10s"},
		"a longer webhook timeout": {args: []string{"--webhook-timeout=30s"}, errHas: "--webhook-reservation-expiry=1m15s is shorter than 1m30s"},
		"both raised":              {args: []string{"--apiserver-request-timeout=2m", "--webhook-timeout=30s", "--webhook-reservation-expiry=150s"}},
		"webhook timeout too long": {args: []string{"--webhook-timeout=31s", "--webhook-reservation-expiry=5m"}, errHas: "--webhook-timeout=31s: the API server waits at most 30s"},
		"no request timeout":       {args: []string{"--apiserver-request-timeout=0s"}, errHas: "--apiserver-request-timeout=0s: it must be positive"},
		"no review in flight":      {args: []string{"--webhook-max-in-flight=0"}, errHas: "--webhook-max-in-flight=0"},
		"missing client CA":        {args: []string{"--webhook-client-ca=/nonexistent/ca.crt"}, errHas: "--webhook-client-ca: open /nonexistent/ca.crt"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.podNS)
			flagtest.WantError(t, flagtest.Validate(t, DefaultOptions(), tc.args...), tc.errHas)
		})
	}
}
