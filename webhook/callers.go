package webhook

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// callers says who may call the webhook. With a client CA (a file, or a
// ConfigMap kept current), only a TLS client whose certificate it signed
// for client use, and, with names, whose common name is one of them: the
// API server, once its admission configuration has it present one.
// Without, any client that reaches the port.
type callers struct {
	opts  *CertOptions
	pool  atomic.Pointer[x509.CertPool]
	names map[string]bool
}

func newCallers(o *CertOptions) *callers {
	c := &callers{opts: o, names: map[string]bool{}}
	for _, n := range o.ClientNames {
		c.names[n] = true
	}
	if o.ClientCA != "" {
		if pool, err := o.clientCAs(); err == nil { // Validate read it already
			c.pool.Store(pool)
		}
	}
	return c
}

// on reports whether callers must present a client certificate.
func (c *callers) on() bool { return c.opts.ClientCA != "" || c.opts.ClientCAConfigMap != "" }

// verify checks a client's certificate chain (tls.Config's
// VerifyPeerCertificate, with every client asked for one).
func (c *callers) verify(raw [][]byte, _ [][]*x509.Certificate) error {
	pool := c.pool.Load()
	if pool == nil {
		return fmt.Errorf("the webhook has not read the CA of its callers' certificates yet (--webhook-client-ca-configmap=%s)", c.opts.ClientCAConfigMap)
	}
	if len(raw) == 0 {
		return errors.New("no client certificate: the webhook serves only the API server, with its client certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		var err error
		if certs[i], err = x509.ParseCertificate(b); err != nil {
			return fmt.Errorf("the client certificate does not parse: %w", err)
		}
	}
	inter := x509.NewCertPool()
	for _, ct := range certs[1:] {
		inter.AddCert(ct)
	}
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the client certificate of %q: %w", clip(leaf.Subject.CommonName), err)
	}
	if len(c.names) > 0 && !c.names[leaf.Subject.CommonName] {
		return fmt.Errorf("the client certificate names %q, not a caller this webhook serves (--webhook-client-names=%s)",
			clip(leaf.Subject.CommonName), strings.Join(c.opts.ClientNames, ","))
	}
	return nil
}

// ready is nil once a client CA that is needed has been read.
func (c *callers) ready() error {
	if c.on() && c.pool.Load() == nil {
		return fmt.Errorf("webhook: reading the CA of the API server's client certificates from ConfigMap %s/%s, key %s (--webhook-client-ca-configmap)",
			c.opts.caNS, c.opts.caName, c.opts.caKey)
	}
	return nil
}

// describe says whether the callers are authenticated, and by what.
func (c *callers) describe(port int) string {
	named := ""
	if len(c.opts.ClientNames) > 0 {
		named = ", named " + strings.Join(c.opts.ClientNames, " or ")
	}
	switch {
	case c.opts.ClientCA != "":
		return fmt.Sprintf("authenticated: only clients with a certificate that the CA in %s signed%s", c.opts.ClientCA, named)
	case c.opts.ClientCAConfigMap != "":
		return fmt.Sprintf("authenticated: only clients with a certificate that the CA in ConfigMap %s/%s, key %s, signed%s",
			c.opts.caNS, c.opts.caName, c.opts.caKey, named)
	}
	return fmt.Sprintf("not authenticated: any client that reaches port %d is served, and only a NetworkPolicy keeps others off it; where the API server can present a client certificate, set quotaManager.webhook.clientAuth.enabled=true (docs/webhook.md)", port)
}

// run keeps the CA of --webhook-client-ca-configmap current, listing and
// watching that one ConfigMap, until ctx ends. A ConfigMap deleted, or
// one whose key holds no certificate, leaves the CA last read in place.
func (c *callers) run(ctx context.Context, kube kubernetes.Interface) {
	if c.opts.ClientCAConfigMap == "" {
		return
	}
	log := klog.FromContext(ctx)
	lw := cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "configmaps", c.opts.caNS, fields.OneTermEqualSelector("metadata.name", c.opts.caName))
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	seen := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(cm.Data[c.opts.caKey])) {
			log.Error(nil, "the client CA ConfigMap holds no PEM certificate under its key: the webhook keeps the CA it read before, if any",
				"configMap", c.opts.caNS+"/"+c.opts.caName, "key", c.opts.caKey)
			return
		}
		c.pool.Store(pool)
		log.Info("read the CA of the API server's client certificates", "configMap", c.opts.caNS+"/"+c.opts.caName, "key", c.opts.caKey)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(any) {
			log.Error(nil, "the client CA ConfigMap was deleted: the webhook keeps the CA it read before", "configMap", c.opts.caNS+"/"+c.opts.caName)
		}})
	inf.Run(ctx.Done())
}

// annotate sets one annotation of the webhook's ValidatingWebhookConfiguration
// to value, with a merge patch (the CA bundle's keeper updates the rest),
// trying again every few seconds until it succeeds or ctx ends: the
// configuration may not exist yet.
func annotate(ctx context.Context, kube kubernetes.Interface, config, key, value string) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	for {
		_, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, config, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: FieldManager})
		if err == nil || ctx.Err() != nil {
			return
		}
		klog.FromContext(ctx).V(1).Info("cannot annotate the webhook configuration yet", "config", config, "annotation", key, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// reported is an annotation's value: what, with who said it and when.
func reported(what, identity string, at time.Time) string {
	return fmt.Sprintf("%s (replica %s, %s)", what, identity, at.UTC().Format(time.RFC3339))
}
