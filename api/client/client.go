package client

import (
	"k8s.io/client-go/rest"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
)

// AcceleratorQuotas is the typed client of AcceleratorQuotas for the
// cluster cfg reaches.
func AcceleratorQuotas(cfg *rest.Config) (aqtyped.AcceleratorQuotaInterface, error) {
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return cs.OmeV1beta1().AcceleratorQuotas(), nil
}
