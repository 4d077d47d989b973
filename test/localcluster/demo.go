package localcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// A100Flavor is the guide's ResourceFlavor a100.
func A100Flavor() *kueuev1beta2.ResourceFlavor {
	return &kueuev1beta2.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec:       kueuev1beta2.ResourceFlavorSpec{NodeLabels: A100Labels},
	}
}

// WriteDemoCluster writes the guide's ResourceFlavor a100 and four A100
// nodes of 8 GPUs, gpu-node-1 to gpu-node-4.
func WriteDemoCluster(ctx context.Context, c *Cluster) error {
	_, err := c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, A100Flavor(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ResourceFlavor a100: %w", err)
	}
	return ApplyGuideNodes(ctx, c)
}

// ApplyGuideNodes applies the guide's four A100 nodes of 8 GPUs,
// gpu-node-1 to gpu-node-4.
func ApplyGuideNodes(ctx context.Context, c *Cluster) error {
	for i := 1; i <= 4; i++ {
		if _, err := ApplyNode(ctx, c.Kube, GPUNode(fmt.Sprintf("gpu-node-%d", i), 8)); err != nil {
			return err
		}
	}
	return nil
}

// ForeignClusterQueue is a ClusterQueue that the quota manager did not
// write, as a user might have made one: one nvidia.com/gpu of a100, and
// none of the manager's labels.
func ForeignClusterQueue(name string) *kueuev1beta2.ClusterQueue {
	return &kueuev1beta2.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kueuev1beta2.ClusterQueueSpec{ResourceGroups: []kueuev1beta2.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{"nvidia.com/gpu"},
			Flavors: []kueuev1beta2.FlavorQuotas{{Name: "a100", Resources: []kueuev1beta2.ResourceQuota{
				{Name: "nvidia.com/gpu", NominalQuota: resource.MustParse("1")}}}},
		}}},
	}
}
