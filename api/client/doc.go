// Package client holds the typed client of the AcceleratorQuota API,
// generated from api/v1beta1 by k8s.io/code-generator (`make generate`):
// clientset/versioned (the clientset, with server-side Apply and
// ApplyStatus), listers, informers and applyconfiguration. Nothing under
// it is edited by hand.
//
// It lives beside api/v1beta1, rather than inside it, because a clientset
// covers every version of the group, and under api/ rather than pkg/
// because the repository has no pkg/ tree: the API and its client ship
// together, as k8s.io/api and k8s.io/client-go do.
package client
