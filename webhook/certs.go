package webhook

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// bundle is the content of the webhook's Secret, parsed.
type bundle struct {
	// caCerts are the CAs the API server trusts (ca.crt). The first signs
	// the serving certificate; a second is the previous CA, kept while a
	// rotation of the CA lets every replica catch up.
	caCerts []*x509.Certificate
	// caKey is the first CA's key (ca.key), nil when the Secret has none.
	caKey crypto.Signer
	// serving is the serving certificate and key, with its Leaf parsed.
	serving tls.Certificate

	caPEM, caKeyPEM, certPEM, keyPEM []byte
}

// data is the Secret's data for the bundle.
func (b *bundle) data() map[string][]byte {
	return map[string][]byte{KeyCACert: b.caPEM, KeyCAKey: b.caKeyPEM, KeyTLSCert: b.certPEM, KeyTLSKey: b.keyPEM}
}

// leaf is the serving certificate.
func (b *bundle) leaf() *x509.Certificate { return b.serving.Leaf }

// parseCA reads ca.crt and ca.key. The key is optional; when present it
// must belong to the first certificate of ca.crt.
func parseCA(data map[string][]byte) ([]*x509.Certificate, crypto.Signer, error) {
	if len(data[KeyCACert]) == 0 {
		return nil, nil, fmt.Errorf("%s is empty", KeyCACert)
	}
	cas, err := cert.ParseCertsPEM(data[KeyCACert])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", KeyCACert, err)
	}
	for _, c := range cas {
		if !c.IsCA {
			return nil, nil, fmt.Errorf("%s holds %q, which is not a CA", KeyCACert, c.Subject.CommonName)
		}
	}
	if len(data[KeyCAKey]) == 0 {
		return cas, nil, nil
	}
	k, err := keyutil.ParsePrivateKeyPEM(data[KeyCAKey])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", KeyCAKey, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !publicKeysEqual(signer.Public(), cas[0].PublicKey) {
		return nil, nil, fmt.Errorf("%s does not belong to the first certificate of %s", KeyCAKey, KeyCACert)
	}
	return cas, signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// parseBundle reads a whole Secret: the CA and a serving certificate that
// it signed.
func parseBundle(data map[string][]byte) (*bundle, error) {
	cas, caKey, err := parseCA(data)
	if err != nil {
		return nil, err
	}
	if len(data[KeyTLSCert]) == 0 || len(data[KeyTLSKey]) == 0 {
		return nil, fmt.Errorf("%s or %s is empty", KeyTLSCert, KeyTLSKey)
	}
	pair, err := tls.X509KeyPair(data[KeyTLSCert], data[KeyTLSKey])
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", KeyTLSCert, KeyTLSKey, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyTLSCert, err)
		}
	}
	return &bundle{caCerts: cas, caKey: caKey, serving: pair,
		caPEM: data[KeyCACert], caKeyPEM: data[KeyCAKey], certPEM: data[KeyTLSCert], keyPEM: data[KeyTLSKey]}, nil
}

// usable says why the bundle cannot serve the names and addresses at time
// now, or nil: the serving certificate is within its validity, chains to
// ca.crt and covers every name and address.
func (b *bundle) usable(now time.Time, dnsNames []string, ips []net.IP) error {
	pool := x509.NewCertPool()
	for _, c := range b.caCerts {
		pool.AddCert(c)
	}
	leaf := b.leaf()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("%s does not verify against %s: %w", KeyTLSCert, KeyCACert, err)
	}
	for _, n := range dnsNames {
		if err := leaf.VerifyHostname(n); err != nil {
			return fmt.Errorf("%s does not cover %s", KeyTLSCert, n)
		}
	}
	for _, ip := range ips {
		if err := leaf.VerifyHostname(ip.String()); err != nil {
			return fmt.Errorf("%s does not cover %s", KeyTLSCert, ip)
		}
	}
	return nil
}

// due says why the bundle should be renewed at time now, or nil: the
// serving certificate, or the CA when this replica holds its key, has
// less than a third of its lifetime left. A CA without its key (brought
// by someone else) is renewed only with the serving certificate.
func (b *bundle) due(now time.Time) error {
	if err := renewalDue(KeyTLSCert, b.leaf(), now); err != nil {
		return err
	}
	if b.caKey != nil {
		return renewalDue(KeyCACert, b.caCerts[0], now)
	}
	return nil
}

func renewalDue(what string, c *x509.Certificate, now time.Time) error {
	life := c.NotAfter.Sub(c.NotBefore)
	if left := c.NotAfter.Sub(now); left < life/3 {
		return fmt.Errorf("%s expires at %s, with less than a third of its lifetime of %s left", what, c.NotAfter.UTC().Format(time.RFC3339), life)
	}
	return nil
}

// backdate is how far before now a new certificate starts, against clock
// skew between the replicas and the API server.
func backdate(lifetime time.Duration) time.Duration { return min(5*time.Minute, lifetime/10) }

// issue makes a new bundle. It keeps prev's CA when that can still sign
// and is not due for renewal; otherwise it makes a new CA and keeps prev's
// CA certificate in ca.crt beside it while that is unexpired, so that a
// replica still serving under the old CA stays trusted.
func issue(prevCAs []*x509.Certificate, prevKey crypto.Signer, now time.Time, caLife, servingLife time.Duration, dnsNames []string, ips []net.IP) (*bundle, error) {
	b := &bundle{}
	if prevKey != nil && len(prevCAs) > 0 && now.Before(prevCAs[0].NotAfter) && renewalDue(KeyCACert, prevCAs[0], now) == nil {
		b.caKey = prevKey
		for i, c := range prevCAs {
			if i == 0 || now.Before(c.NotAfter) {
				b.caCerts = append(b.caCerts, c)
			}
		}
	} else {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		sn, err := serial()
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          sn,
			Subject:               pkix.Name{CommonName: fmt.Sprintf("ome-quota-manager-webhook-ca@%d", now.Unix())},
			NotBefore:             now.Add(-backdate(caLife)),
			NotAfter:              now.Add(caLife),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return nil, err
		}
		ca, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		b.caCerts, b.caKey = []*x509.Certificate{ca}, key
		if len(prevCAs) > 0 && now.Before(prevCAs[0].NotAfter) {
			b.caCerts = append(b.caCerts, prevCAs[0])
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := b.caCerts[0]
	notAfter := now.Add(servingLife)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    now.Add(-backdate(servingLife)),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), b.caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if b.caPEM, err = cert.EncodeCertificates(b.caCerts...); err != nil {
		return nil, err
	}
	if b.caKeyPEM, err = keyutil.MarshalPrivateKeyToPEM(b.caKey); err != nil {
		return nil, err
	}
	if b.certPEM, err = cert.EncodeCertificates(leaf); err != nil {
		return nil, err
	}
	if b.keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, err
	}
	b.serving = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return b, nil
}

// serial is a random serial number in [1, 2^127].
func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("drawing a certificate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
