package localcluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	for i := 1; i <= 4; i++ {
		if _, err := ApplyNode(ctx, c.Kube, GPUNode(fmt.Sprintf("gpu-node-%d", i), 8)); err != nil {
			return err
		}
	}
	return nil
}
