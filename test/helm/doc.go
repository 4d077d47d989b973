// Package helm installs charts/ome-quota-manager on the local control plane
// (RBAC on) with the helm v4 binary built from tools/kube, following the
// guide's helm commands as written: install (client-side and server-side
// apply), upgrade, uninstall. There is no kubelet, so the Deployment's
// container is run as a process: its rendered command, args and env, with a
// token of the chart's ServiceAccount, so that the chart's RBAC is what
// the manager really gets.
package helm
