package localcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A100Labels are the labels of the guide's A100 nodes, which its
// ResourceFlavor a100 selects.
var A100Labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}

// FakeNode describes a Node as a kubelet would report it. No kubelet runs on
// the local control plane, so nothing overwrites what is written here.
type FakeNode struct {
	Name   string
	Labels map[string]string
	// Capacity is status.capacity; Allocatable defaults to it.
	Capacity    map[corev1.ResourceName]string
	Allocatable map[corev1.ResourceName]string
	NotReady    bool
	Cordoned    bool
}

// GPUNode is an A100 node with n nvidia.com/gpu.
func GPUNode(name string, n int) FakeNode {
	return FakeNode{Name: name, Labels: A100Labels, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": fmt.Sprint(n)}}
}

func toList(m map[corev1.ResourceName]string) (corev1.ResourceList, error) {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
	for k, v := range m {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", k, err)
		}
		l[k] = q
	}
	return l, nil
}

// ApplyNode creates the Node, or updates it to match, including its status
// subresource (capacity, allocatable, the Ready condition).
func ApplyNode(ctx context.Context, cs kubernetes.Interface, n FakeNode) (*corev1.Node, error) {
	capacity, err := toList(n.Capacity)
	if err != nil {
		return nil, err
	}
	alloc := capacity
	if n.Allocatable != nil {
		if alloc, err = toList(n.Allocatable); err != nil {
			return nil, err
		}
	}
	nodes := cs.CoreV1().Nodes()
	node, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}, Spec: corev1.NodeSpec{Unschedulable: n.Cordoned}}, metav1.CreateOptions{})
	} else if err == nil {
		node.Labels = n.Labels
		node.Spec.Unschedulable = n.Cordoned
		node, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	ready := corev1.ConditionTrue
	if n.NotReady {
		ready = corev1.ConditionFalse
	}
	node.Status.Capacity = capacity
	node.Status.Allocatable = alloc
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "FakeKubelet", LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: node.CreationTimestamp}}
	node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s status: %w", n.Name, err)
	}
	return node, nil
}
