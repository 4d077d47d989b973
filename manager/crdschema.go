package manager

import (
	"context"
	"slices"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/projector/apply"
)

// AQCRDName is the AcceleratorQuota CRD's name.
const AQCRDName = "acceleratorquotas.ome.io"

// schemaWatch reads the installed AcceleratorQuota CRD's status schema,
// so that status writes leave out the fields it does not declare (OME's
// ome-chart CRD has no status.summary nor status.unbudgeted): the API
// server refuses a whole status write that sets one. It logs each change,
// publishes ome_quota_status_fields_unwritten, and, while the CRD cannot
// be read, keeps what it last read (at first: every field is written).
type schemaWatch struct {
	m       *Manager
	crds    apiextensionsclient.Interface
	missing []string
	problem string
}

// check reads the CRD once.
func (w *schemaWatch) check(ctx context.Context) {
	log := klog.FromContext(ctx)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	crd, err := w.crds.ApiextensionsV1().CustomResourceDefinitions().Get(rctx, AQCRDName, metav1.GetOptions{})
	var s *apply.StatusSchema
	if err == nil {
		s, err = apply.NewStatusSchema(crd)
	}
	if err != nil {
		if p := err.Error(); p != w.problem && ctx.Err() == nil {
			log.Error(err, "cannot read the AcceleratorQuota CRD's schema; status writes keep the fields last read (all of them until it is read once)", "crd", AQCRDName)
			w.problem = p
		}
		return
	}
	w.problem = ""
	var missing []string
	if s != nil {
		missing = s.Missing
	}
	w.m.applier.Schema.Store(s)
	if slices.Equal(missing, w.missing) {
		return
	}
	for _, f := range w.missing {
		w.m.metrics.StatusUnwritten.DeleteLabelValues(f)
	}
	for _, f := range missing {
		w.m.metrics.StatusUnwritten.WithLabelValues(f).Set(1)
	}
	if len(missing) > 0 {
		log.Info("the installed AcceleratorQuota CRD does not declare these status fields, so status writes leave them out", "crd", AQCRDName, "fields", missing)
	} else {
		log.Info("the installed AcceleratorQuota CRD declares every status field again; status writes carry them all", "crd", AQCRDName)
	}
	w.missing = missing
}

// everyUntil calls f every interval until ctx ends.
func everyUntil(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
