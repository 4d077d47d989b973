#!/usr/bin/env bash
# Builds the local control plane's binaries (kube-apiserver, kubectl, etcd, and
# Kueue's manager) from the pinned modules under tools/, once, into the user
# cache directory keyed by the pinned versions. Later runs reuse them.
# Prints the folder that holds them on its last line of standard output.
#
# `hack/tools.sh helm` builds only the helm v4 binary (tools/helm), into a
# folder of its own keyed by that module alone, and prints that folder. The
# chart's tests ask for it; nothing else needs it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# Bump layout when this script changes what it puts in the folder.
layout=1
cache=${OME_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ome-quota-manager}

# build MODULE_DIR LDFLAGS TAGS NAME=PACKAGE...: the binaries missing from
# $dir, into $dir.tmp, in one `go build` (packages they share compiled once,
# one binary linked while the next compiles), with a package count as
# progress. Each binary is named after its package's last path element.
# `go build -v` names each package it compiles, a path without spaces;
# every other line (downloads, compiler and linker errors, "signal:
# killed" when memory runs out) is shown.
build() {
  local mod=$1 ldflags=$2 tags=$3
  shift 3
  local names=() pkgs=() np
  for np in "$@"; do
    if [ ! -x "$dir/${np%%=*}" ]; then names+=("${np%%=*}"); pkgs+=("${np#*=}"); fi
  done
  if [ ${#names[@]} -eq 0 ]; then return 0; fi
  local start=$SECONDS what="${names[*]}"
  echo ">> building ${what// /, } from tools/$mod (cold: several minutes on 2 cores; cached in $dir)" >&2
  mkdir -p "$dir.tmp"
  local rc=0 name
  { (cd "$root/tools/$mod" && CGO_ENABLED=0 go build -mod=readonly -trimpath -v -tags "$tags" -ldflags "$ldflags" -o "$dir.tmp/" "${pkgs[@]}") 2>&1 |
    awk -v n="${what// /+}" '/^#/ || / / {print > "/dev/stderr"; next} {c++; if (c % 200 == 0) {printf("   %s: %d packages compiled\n", n, c) > "/dev/stderr"; fflush("/dev/stderr")}}'; } || rc=$?
  for name in "${names[@]}"; do
    if [ "$rc" -ne 0 ] || [ ! -x "$dir.tmp/$name" ]; then
      echo "!! building ${what// /, } failed: see the errors above; re-run 'make tools' once fixed" >&2
      return 1
    fi
  done
  echo "   ${what// /, } built in $((SECONDS - start))s" >&2
}

if [ "${1:-}" = helm ]; then
  # Its own key and its own parent folder ($cache/helm), so neither this
  # binary nor its version ever changes the control plane's key below.
  helm_version=$(cd "$root/tools/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
  hkey=$( { go env GOVERSION GOOS GOARCH; echo "$layout $helm_version"; cat "$root"/tools/helm/go.mod "$root"/tools/helm/go.sum; } | sha256sum | cut -c1-16)
  dir="$cache/helm/$hkey"
  mkdir -p "$dir"
  build helm "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" "" helm=helm.sh/helm/v4/cmd/helm
  if [ -f "$dir.tmp/helm" ]; then mv "$dir.tmp/helm" "$dir/helm"; fi
  rmdir "$dir.tmp" 2>/dev/null || true
  find "$cache/helm" -mindepth 1 -maxdepth 1 -type d ! -name "$hkey" ! -name "$hkey.tmp" -exec rm -rf {} + 2>/dev/null || true
  echo "$dir"
  exit 0
fi

if [ "${1:-}" = prometheus ]; then
  # The Prometheus server and promtool (tools/prometheus, a module of its own
  # because it pulls a newer k8s.io than the project's). Keyed by that module
  # alone, in its own parent folder ($cache/prometheus), like helm above.
  prom_version=$(cd "$root/tools/prometheus" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
  # Only static scrape targets are used, so every service discovery plugin
  # (cloud SDKs, most of the module's weight) is left out of both binaries.
  prom_tags=remove_all_sd
  pkey=$( { go env GOVERSION GOOS GOARCH; echo "$layout $prom_version $prom_tags"; cat "$root"/tools/prometheus/go.mod "$root"/tools/prometheus/go.sum; } | sha256sum | cut -c1-16)
  dir="$cache/prometheus/$pkey"
  mkdir -p "$dir"
  prom_ldflags="-s -w -X github.com/prometheus/common/version.Version=$prom_version"
  build prometheus "$prom_ldflags" "$prom_tags" promtool=github.com/prometheus/prometheus/cmd/promtool \
    prometheus=github.com/prometheus/prometheus/cmd/prometheus
  for b in promtool prometheus; do
    if [ -f "$dir.tmp/$b" ]; then mv "$dir.tmp/$b" "$dir/$b"; fi
  done
  rmdir "$dir.tmp" 2>/dev/null || true
  find "$cache/prometheus" -mindepth 1 -maxdepth 1 -type d ! -name "$pkey" ! -name "$pkey.tmp" -exec rm -rf {} + 2>/dev/null || true
  echo "$dir"
  exit 0
fi

# The control plane's key covers its two modules only (tools/helm and
# tools/prometheus have their own keys above): tools/etcd, and tools/kube,
# which holds kube-apiserver, kubectl and Kueue's manager in one module, so
# that the Kubernetes libraries they share are of one version and compiled
# once.
key=$( { go env GOVERSION GOOS GOARCH; echo "$layout"; cat "$root"/tools/{etcd,kube}/go.mod "$root"/tools/{etcd,kube}/go.sum "$root"/tools/etcd/main.go; } | sha256sum | cut -c1-16)
dir="$cache/bin/$key"
mkdir -p "$cache/bin"

kube_version=v1.35.4
# The version stamps of kube-apiserver and kubectl; Kueue's manager, linked
# in the same build, gets them too (its client's user agent then names
# v1.35.4, the version of the client libraries it is built with).
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=35 \
 -X k8s.io/client-go/pkg/version.gitVersion=$kube_version \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=35"

mkdir -p "$dir"
# etcd (its own module, little shared) builds alongside the other three.
build etcd "-s -w" "" etcd=ome.io/quota-manager/tools/etcd &
etcd_pid=$!
kube_rc=0
build kube "$kube_ldflags" "" kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kubectl=k8s.io/kubernetes/cmd/kubectl kueue=sigs.k8s.io/kueue/cmd/kueue || kube_rc=$?
etcd_rc=0
wait "$etcd_pid" || etcd_rc=$?
if [ "$kube_rc" -ne 0 ] || [ "$etcd_rc" -ne 0 ]; then exit 1; fi
for b in etcd kubectl kueue kube-apiserver; do
  if [ -f "$dir.tmp/$b" ]; then mv "$dir.tmp/$b" "$dir/$b"; fi
done
rmdir "$dir.tmp" 2>/dev/null || true

# Kueue's CRDs and webhook manifests, copied from the module it was built from.
if [ ! -d "$dir/kueue-crds" ]; then
  kdir=$(cd "$root/tools/kube" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$dir/kueue-crds.tmp"
  cp "$kdir"/config/components/crd/bases/*.yaml "$dir/kueue-crds.tmp/"
  cp "$kdir"/config/components/webhook/manifests.yaml "$dir/kueue-webhooks.yaml"
  chmod -R u+w "$dir/kueue-crds.tmp" "$dir/kueue-webhooks.yaml"
  mv "$dir/kueue-crds.tmp" "$dir/kueue-crds"
fi
# Drop folders of older keys, so a version change does not pile up binaries.
find "$cache/bin" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name "$key.tmp" -exec rm -rf {} + 2>/dev/null || true
echo "$dir"
