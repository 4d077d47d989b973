#!/usr/bin/env bash
# Builds kubectl-ome for this machine: $BIN_DIR/kubectl-ome (bin/ by
# default). With "krew", it also builds one archive per platform in $DIST_DIR
# (dist/ by default; the binary at the archive's top level), and renders
# plugins/ome.yaml to $DIST_DIR/ome.yaml with VERSION and the archives'
# SHA-256 sums. VERSION defaults to v0.0.0-<commit>.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/hack/goflags.sh"
bin=${BIN_DIR:-bin} dist=${DIST_DIR:-dist}
mkdir -p "$bin"
go build $OME_GOFLAGS -o "$bin/kubectl-ome" ./cmd/kubectl-ome
if [ "${1:-}" != krew ]; then
  echo "$bin/kubectl-ome (make plugin-krew builds the krew archives)"
  exit 0
fi
version=${VERSION:-v0.0.0-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}
mkdir -p "$dist"
manifest=$(sed "s/VERSION/$version/g" plugins/ome.yaml)
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${platform%/*} arch=${platform#*/}
  work=$(mktemp -d)
  GOOS=$os GOARCH=$arch go build $OME_GOFLAGS -ldflags="-s -w" -o "$work/kubectl-ome" ./cmd/kubectl-ome
  archive=$dist/kubectl-ome_${os}_${arch}.tar.gz
  tar -C "$work" --owner=0 --group=0 --mtime='2000-01-01 00:00Z' -czf "$archive" kubectl-ome
  rm -rf "$work"
  sum=$(sha256sum "$archive" | cut -d' ' -f1)
  key=SHA256_$(echo "${os}_${arch}" | tr '[:lower:]' '[:upper:]')
  manifest=${manifest//$key/$sum}
  echo "$archive $sum"
done
printf '%s\n' "$manifest" > "$dist/ome.yaml"
echo "$bin/kubectl-ome; $dist/ome.yaml for krew, version $version"
