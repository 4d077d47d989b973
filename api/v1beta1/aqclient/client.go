// Package aqclient is a typed client for AcceleratorQuota objects, built on
// client-go's dynamic client: it converts between the typed API and
// unstructured objects, so no generated clientset is needed.
package aqclient

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// Client reads and writes AcceleratorQuotas.
type Client struct {
	ri dynamic.NamespaceableResourceInterface
}

// New returns a client for the cluster cfg reaches.
func New(cfg *rest.Config) (*Client, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return ForDynamic(dc), nil
}

// ForDynamic wraps an existing dynamic client.
func ForDynamic(dc dynamic.Interface) *Client {
	return &Client{ri: dc.Resource(v1beta1.AcceleratorQuotas)}
}

// Dynamic returns the underlying resource client, for informers.
func (c *Client) Dynamic() dynamic.NamespaceableResourceInterface { return c.ri }

// ToUnstructured converts a typed object, setting its apiVersion and kind.
func ToUnstructured(aq *v1beta1.AcceleratorQuota) (*unstructured.Unstructured, error) {
	cp := aq.DeepCopy()
	cp.APIVersion = v1beta1.SchemeGroupVersion.String()
	cp.Kind = "AcceleratorQuota"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
	if err != nil {
		return nil, fmt.Errorf("encoding AcceleratorQuota %s: %w", aq.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromUnstructured converts an unstructured object to the typed API.
func FromUnstructured(u *unstructured.Unstructured) (*v1beta1.AcceleratorQuota, error) {
	aq := &v1beta1.AcceleratorQuota{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, aq); err != nil {
		return nil, fmt.Errorf("decoding AcceleratorQuota %s: %w", u.GetName(), err)
	}
	return aq, nil
}

func decode(u *unstructured.Unstructured, err error) (*v1beta1.AcceleratorQuota, error) {
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// Get reads one node.
func (c *Client) Get(ctx context.Context, name string) (*v1beta1.AcceleratorQuota, error) {
	return decode(c.ri.Get(ctx, name, metav1.GetOptions{}))
}

// List reads every node.
func (c *Client) List(ctx context.Context) ([]v1beta1.AcceleratorQuota, error) {
	ul, err := c.ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]v1beta1.AcceleratorQuota, 0, len(ul.Items))
	for i := range ul.Items {
		aq, err := FromUnstructured(&ul.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *aq)
	}
	return out, nil
}

// Create writes a new node.
func (c *Client) Create(ctx context.Context, aq *v1beta1.AcceleratorQuota, opts metav1.CreateOptions) (*v1beta1.AcceleratorQuota, error) {
	u, err := ToUnstructured(aq)
	if err != nil {
		return nil, err
	}
	return decode(c.ri.Create(ctx, u, opts))
}

// Update replaces a node's spec and metadata.
func (c *Client) Update(ctx context.Context, aq *v1beta1.AcceleratorQuota, opts metav1.UpdateOptions) (*v1beta1.AcceleratorQuota, error) {
	u, err := ToUnstructured(aq)
	if err != nil {
		return nil, err
	}
	return decode(c.ri.Update(ctx, u, opts))
}

// UpdateStatus replaces a node's status through the status subresource.
func (c *Client) UpdateStatus(ctx context.Context, aq *v1beta1.AcceleratorQuota, opts metav1.UpdateOptions) (*v1beta1.AcceleratorQuota, error) {
	u, err := ToUnstructured(aq)
	if err != nil {
		return nil, err
	}
	return decode(c.ri.UpdateStatus(ctx, u, opts))
}

// Patch patches a node (or its status, with subresource "status").
func (c *Client) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1beta1.AcceleratorQuota, error) {
	return decode(c.ri.Patch(ctx, name, pt, data, opts, subresources...))
}

// ApplyStatus server-side applies a node's status through the status
// subresource, sending only apiVersion, kind, name and status: the fields
// the field manager then owns.
func (c *Client) ApplyStatus(ctx context.Context, aq *v1beta1.AcceleratorQuota, fieldManager string) (*v1beta1.AcceleratorQuota, error) {
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&aq.Status)
	if err != nil {
		return nil, fmt.Errorf("encoding the status of %s: %w", aq.Name, err)
	}
	obj := map[string]any{
		"apiVersion": v1beta1.SchemeGroupVersion.String(),
		"kind":       "AcceleratorQuota",
		"metadata":   map[string]any{"name": aq.Name},
		"status":     st,
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	force := true
	return decode(c.ri.Patch(ctx, aq.Name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force}, "status"))
}

// Delete deletes a node.
func (c *Client) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.ri.Delete(ctx, name, opts)
}

// Watch watches every node.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.ri.Watch(ctx, opts)
}
