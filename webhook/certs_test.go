package webhook

import (
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
)

var (
	testNames = []string{"ome-quota-manager-webhook.ome.svc", "ome-quota-manager-webhook"}
	testIPs   = []net.IP{net.ParseIP("127.0.0.1")}
	t0        = time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC)
)

func mustIssue(t *testing.T, prev *bundle, now time.Time, caLife, servingLife time.Duration) *bundle {
	t.Helper()
	var b *bundle
	var err error
	if prev == nil {
		b, err = issue(nil, nil, now, caLife, servingLife, testNames, testIPs)
	} else {
		b, err = issue(prev.caCerts, prev.caKey, now, caLife, servingLife, testNames, testIPs)
	}
	if err != nil {
		t.Fatal(err)
	}
	// What is written must read back the same.
	back, err := parseBundle(b.data())
	if err != nil {
		t.Fatalf("reading back an issued bundle: %v", err)
	}
	if !back.leaf().Equal(b.leaf()) || back.caKey == nil {
		t.Fatal("the bundle read back differs")
	}
	return back
}

func TestIssueAndCheck(t *testing.T) {
	year := 365 * 24 * time.Hour
	b := mustIssue(t, nil, t0, 10*year, year)
	if err := b.usable(t0, testNames, testIPs); err != nil {
		t.Fatalf("a fresh bundle is not usable: %v", err)
	}
	if err := b.due(t0); err != nil {
		t.Fatalf("a fresh bundle is due: %v", err)
	}
	if got := b.leaf().NotAfter.Sub(t0); got != year {
		t.Errorf("the serving certificate lasts %s, want a year", got)
	}
	if err := b.usable(t0, append(testNames, "other.example"), testIPs); err == nil || !strings.Contains(err.Error(), "does not cover other.example") {
		t.Errorf("a missing name: got %v", err)
	}
	if err := b.usable(t0, testNames, []net.IP{net.ParseIP("10.0.0.1")}); err == nil || !strings.Contains(err.Error(), "does not cover 10.0.0.1") {
		t.Errorf("a missing address: got %v", err)
	}
	if err := b.usable(t0.Add(2*year), testNames, testIPs); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("an expired certificate: got %v", err)
	}

	// Two thirds into its life, the serving certificate is due; the CA is
	// reused for the next one.
	later := t0.Add(245 * 24 * time.Hour)
	if err := b.due(later); err == nil || !strings.Contains(err.Error(), "tls.crt expires at") {
		t.Fatalf("a serving certificate with a third of its life left: got %v", err)
	}
	next := mustIssue(t, b, later, 10*year, year)
	if !next.caCerts[0].Equal(b.caCerts[0]) || len(next.caCerts) != 1 {
		t.Error("renewing the serving certificate replaced the CA")
	}
	if next.leaf().SerialNumber.Cmp(b.leaf().SerialNumber) == 0 {
		t.Error("renewing kept the serial number")
	}

	// Near the CA's end, a new CA is made and the old one stays in the
	// bundle, so the old serving certificate is still trusted.
	late := t0.Add(7 * year)
	if err := next.due(late); err == nil {
		t.Fatal("a CA with less than a third of its life left is not due")
	}
	rotated := mustIssue(t, next, late, 10*year, year)
	if rotated.caCerts[0].Equal(next.caCerts[0]) || len(rotated.caCerts) != 2 || !rotated.caCerts[1].Equal(next.caCerts[0]) {
		t.Fatalf("the CA was not rotated with the old one kept: %d CAs", len(rotated.caCerts))
	}
	pool, err := cert.NewPoolFromBytes(rotated.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*x509.Certificate{next.leaf(), rotated.leaf()} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: c.NotBefore.Add(time.Hour), DNSName: testNames[0]}); err != nil {
			t.Errorf("a serving certificate is not trusted by the rotated bundle: %v", err)
		}
	}
}

func TestShortLifetimes(t *testing.T) {
	b := mustIssue(t, nil, t0, time.Minute, 6*time.Second)
	if err := b.usable(t0, testNames, testIPs); err != nil {
		t.Fatal(err)
	}
	if err := b.due(t0.Add(3 * time.Second)); err != nil {
		t.Errorf("due too early: %v", err)
	}
	if err := b.due(t0.Add(5 * time.Second)); err == nil {
		t.Error("not due with a sixth of its life left")
	}
	// A serving certificate never outlives its CA.
	c := mustIssue(t, nil, t0, 10*time.Second, time.Hour)
	if !c.leaf().NotAfter.Equal(c.caCerts[0].NotAfter) {
		t.Errorf("the serving certificate ends at %s, after its CA (%s)", c.leaf().NotAfter, c.caCerts[0].NotAfter)
	}
}

func TestParseBundleErrors(t *testing.T) {
	year := 365 * 24 * time.Hour
	a := mustIssue(t, nil, t0, 10*year, year)
	b := mustIssue(t, nil, t0, 10*year, year)
	with := func(k string, v []byte) map[string][]byte {
		d := a.data()
		d[k] = v
		return d
	}
	tests := map[string]struct {
		data map[string][]byte
		want string // in parseBundle's or usable's error
	}{
		"empty Secret":     {map[string][]byte{}, "ca.crt is empty"},
		"garbage CA":       {with(KeyCACert, []byte("junk")), "ca.crt"},
		"a leaf as CA":     {with(KeyCACert, a.certPEM), "is not a CA"},
		"another CA's key": {with(KeyCAKey, b.caKeyPEM), "ca.key does not belong"},
		"no serving key":   {with(KeyTLSKey, nil), "tls.crt or tls.key is empty"},
		"mismatched key":   {with(KeyTLSKey, b.keyPEM), "tls.crt and tls.key"},
		"signed by another": {map[string][]byte{KeyCACert: b.caPEM, KeyCAKey: b.caKeyPEM, KeyTLSCert: a.certPEM, KeyTLSKey: a.keyPEM},
			"does not verify against ca.crt"},
		"foreign without key": {with(KeyCAKey, nil), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseBundle(tc.data)
			if err == nil {
				err = got.usable(t0, testNames, testIPs)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want a usable bundle", err)
				}
				if got.caKey != nil || got.due(t0) != nil {
					t.Errorf("a CA without its key: key %v, due %v", got.caKey, got.due(t0))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
