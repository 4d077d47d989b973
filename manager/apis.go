package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// quotaAPI is what every manager watches: its AcceleratorQuotas.
var quotaAPI = API{
	GroupVersion: v1beta1.SchemeGroupVersion.String(), Resources: []string{"acceleratorquotas"},
	What: "the AcceleratorQuota CRD",
	Fix:  "install it (config/crd/ome.io_acceleratorquotas.yaml; the chart installs it)",
}

// apiCheckInterval is how often the manager looks for missing APIs, and
// apiLogInterval how often it logs that they are still missing.
const (
	apiCheckInterval = time.Second
	apiLogInterval   = 30 * time.Second
)

// missingAPIs asks the API server's discovery which required resources it
// does not serve, and says what to install.
func missingAPIs(d discovery.DiscoveryInterface, apis []API) error {
	var problems []string
	for _, api := range apis {
		var missing []string
		list, err := d.ServerResourcesForGroupVersion(api.GroupVersion)
		switch {
		case apierrors.IsNotFound(err):
			missing = api.Resources
		case err != nil:
			return fmt.Errorf("cannot ask the API server which resources %s serves: %w", api.GroupVersion, err)
		default:
			served := map[string]bool{}
			for _, r := range list.APIResources {
				served[r.Name] = true
			}
			for _, r := range api.Resources {
				if !served[r] {
					missing = append(missing, r)
				}
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s are missing: the API server does not serve %s %s; %s",
				api.What, api.GroupVersion, strings.Join(slices.Sorted(slices.Values(missing)), ", "), api.Fix))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s. The quota manager starts within seconds of them appearing", strings.Join(problems, "; "))
}

// waitForAPIs returns once the API server serves every resource the
// manager watches. Meanwhile the replica is not ready, /readyz and the
// webhook's refusals name what is missing, and a log line repeats it every
// apiLogInterval. It also returns when ctx ends.
func (m *Manager) waitForAPIs(ctx context.Context) {
	log := klog.FromContext(ctx)
	m.setStartup("checking that the API server serves the AcceleratorQuota and Kueue APIs")
	var logged time.Time
	for {
		apis := append([]API{quotaAPI}, m.mode.APIs()...)
		err := missingAPIs(m.kube.Discovery(), apis)
		if err == nil {
			if !logged.IsZero() {
				log.Info("the missing APIs are served now; starting")
			}
			return
		}
		m.setStartup(err.Error())
		if now := time.Now(); now.Sub(logged) >= apiLogInterval {
			log.Error(err, "waiting for the APIs the quota manager watches")
			logged = now
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(apiCheckInterval):
		}
	}
}
