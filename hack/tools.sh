#!/usr/bin/env bash
# Builds the binaries the tests and demos run (etcd, kube-apiserver, kubectl,
# Kueue's manager, helm, prometheus and promtool) from the pinned module
# tools/kube, once, into the user cache directory keyed by the pinned
# versions. Later runs reuse them. Prints the folder that holds them on its
# last line of standard output.
#
# tools/kube holds every binary in one module, and requires the same version
# of each module the project also compiles (go.mod at the root): one `go
# build` then compiles each shared package once, and the project's own
# compile finds the Kubernetes, Kueue and helm libraries already in the Go
# build cache. hack/toolversions's test keeps them in step. etcd's server is
# the version of the etcd client kube-apiserver is built with (v3.6.5), whose
# gRPC and OpenTelemetry are no newer than kube-apiserver's, so it shares
# them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/goflags.sh"
# Bump layout when this script changes what it puts in the folder.
layout=3
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
  { (cd "$root/tools/$mod" && go build -mod=readonly $OME_GOFLAGS -v -tags "$tags" -ldflags "$ldflags" -o "$dir.tmp/" "${pkgs[@]}") 2>&1 |
    awk -v n="${what// /+}" '/^#/ || / / {print > "/dev/stderr"; next} {c++; if (c % 200 == 0) {printf("   %s: %d packages compiled\n", n, c) > "/dev/stderr"; fflush("/dev/stderr")}}'; } || rc=$?
  for name in "${names[@]}"; do
    if [ "$rc" -ne 0 ] || [ ! -x "$dir.tmp/$name" ]; then
      echo "!! building ${what// /, } failed: see the errors above; re-run 'make tools' once fixed" >&2
      return 1
    fi
  done
  echo "   ${what// /, } built in $((SECONDS - start))s" >&2
}

# The key covers the module, etcd's main package and the compile flags
# (hack/goflags.sh): binaries built with other flags would leave the tests
# no compiled package to share in Go's build cache.
key=$( { go env GOVERSION GOOS GOARCH; echo "$layout"; cat "$root"/tools/kube/go.mod "$root"/tools/kube/go.sum "$root"/tools/kube/etcd/main.go "$root"/hack/goflags.sh; } | sha256sum | cut -c1-16)
dir="$cache/bin/$key"
mkdir -p "$cache/bin"

kube_version=v1.35.4
helm_version=$(cd "$root/tools/kube" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
# Prometheus's module v0.3MM.P is its release 3.MM.P.
prom_version=$(cd "$root/tools/kube" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus |
  awk -F. '{printf "3.%d.%s", $2 - 300, $3}')
# The version stamps of kube-apiserver and kubectl; Kueue's manager, linked
# in the same build, gets them too (its client's user agent then names
# v1.35.4, the version of the client libraries it is built with). helm and
# prometheus get their own; a -X for a package a binary does not link is
# ignored.
kube_ldflags="-s -w \
 -X helm.sh/helm/v4/internal/version.version=$helm_version \
 -X github.com/prometheus/common/version.Version=$prom_version \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=35 \
 -X k8s.io/client-go/pkg/version.gitVersion=$kube_version \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=35"

mkdir -p "$dir"
# Prometheus uses only static scrape targets here, so its service discovery
# plugins (cloud SDKs, most of its weight) are left out by the
# remove_all_sd tag, which no other module here reads.
build kube "$kube_ldflags" remove_all_sd etcd=ome.io/quota-manager/tools/kube/etcd \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kubectl=k8s.io/kubernetes/cmd/kubectl kueue=sigs.k8s.io/kueue/cmd/kueue \
  helm=helm.sh/helm/v4/cmd/helm prometheus=github.com/prometheus/prometheus/cmd/prometheus \
  promtool=github.com/prometheus/prometheus/cmd/promtool || exit 1
for b in etcd kubectl kueue kube-apiserver helm prometheus promtool; do
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
# Drop folders of older keys, so a version change does not pile up binaries,
# and those of the layout before helm and prometheus joined tools/kube.
rm -rf "$cache/helm" "$cache/prometheus"
find "$cache/bin" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name "$key.tmp" -exec rm -rf {} + 2>/dev/null || true
echo "$dir"
