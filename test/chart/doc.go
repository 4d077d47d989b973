// Package chart renders charts/ome-quota-manager with the helm SDK (the same
// code path as `helm template`) and checks what each value becomes: the
// objects, the manager's flags, the schema's and the templates' refusals,
// and `helm lint --strict`. It needs no control plane; package test/helm
// installs the chart on a real apiserver with a helm binary.
package chart
