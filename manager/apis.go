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
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// requiredAPI is a group version whose resources the manager watches, and
// what to do when they are missing.
type requiredAPI struct {
	groupVersion string
	resources    []string
	what, fix    string
}

var requiredAPIs = []requiredAPI{
	{
		groupVersion: v1beta1.SchemeGroupVersion.String(), resources: []string{"acceleratorquotas"},
		what: "the AcceleratorQuota CRD",
		fix:  "install it (config/crd/ome.io_acceleratorquotas.yaml; the chart installs it)",
	},
	{
		groupVersion: kueue.GroupVersion.String(), resources: []string{"clusterqueues", "cohorts", "localqueues", "resourceflavors"},
		what: "Kueue's CRDs",
		fix:  "install Kueue v0.17 or newer (its manifests or chart install the CRDs)",
	},
}

// clusterProfileAPI is what a plane whose members are ClusterProfiles
// watches.
var clusterProfileAPI = requiredAPI{
	groupVersion: "multicluster.x-k8s.io/v1alpha1", resources: []string{"clusterprofiles"},
	what: "the ClusterProfile CRD (SIG-Multicluster's cluster inventory)",
	fix:  "install it with your fleet manager (Open Cluster Management, GKE Fleet, ...) or from sigs.k8s.io/cluster-inventory-api's config/crd, or run the plane with --members-from=secrets",
}

// apiCheckInterval is how often the manager looks for missing APIs, and
// apiLogInterval how often it logs that they are still missing.
const (
	apiCheckInterval = time.Second
	apiLogInterval   = 30 * time.Second
)

// missingAPIs asks the API server's discovery which required resources it
// does not serve, and says what to install.
func missingAPIs(d discovery.DiscoveryInterface, apis []requiredAPI) error {
	var problems []string
	for _, api := range apis {
		var missing []string
		list, err := d.ServerResourcesForGroupVersion(api.groupVersion)
		switch {
		case apierrors.IsNotFound(err):
			missing = api.resources
		case err != nil:
			return fmt.Errorf("cannot ask the API server which resources %s serves: %w", api.groupVersion, err)
		default:
			served := map[string]bool{}
			for _, r := range list.APIResources {
				served[r.Name] = true
			}
			for _, r := range api.resources {
				if !served[r] {
					missing = append(missing, r)
				}
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s are missing: the API server does not serve %s %s; %s",
				api.what, api.groupVersion, strings.Join(slices.Sorted(slices.Values(missing)), ", "), api.fix))
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
		apis := requiredAPIs
		if m.plane != nil {
			// A plane watches its AcceleratorQuotas, and its inventory.
			apis = apis[:1]
			if m.opts.MembersFrom == MembersFromClusterProfiles {
				apis = append(slices.Clone(apis), clusterProfileAPI)
			}
		}
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
