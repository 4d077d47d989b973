# The two commands that matter are `make demo` and `make test`; both build
# the local control plane's binaries first (cached in the user cache folder).
SHELL := /bin/bash
GO ?= go
PKGS := ./...

.PHONY: all test unit demo demo-fleet tools generate lint fuzz bench image plugin plugin-krew perf fleet-bench

all: lint test

## tools: build (or find in the cache) etcd, kube-apiserver, kubectl, Kueue,
## helm, prometheus and promtool.
tools:
	@hack/tools.sh >/dev/null

# lint, unit, test and image compile with the flags of hack/goflags.sh (no
# cgo, -trimpath, no DWARF), as hack/tools.sh and hack/plugin.sh do, so that
# one compile of each package serves the tools, go vet, the tests, the
# manager binaries they start, the plugin and the amd64 image.
OME_GOFLAGS := $(shell . ./hack/goflags.sh && echo "$$OME_GOFLAGS")
lint test unit image: export CGO_ENABLED := 0
lint test unit image: export GOFLAGS := $(if $(findstring $(OME_GOFLAGS),$(GOFLAGS)),$(GOFLAGS),$(strip $(OME_GOFLAGS) $(GOFLAGS)))

## test: the tools, then lint (its compile finds the libraries it shares
## with the tools in the Go build cache, at the same versions), then unit,
## integration and e2e tests on a real local control plane (without go
## test's own vet, a subset of what lint's go vet has just checked).
test:
	@$(MAKE) --no-print-directory tools
	@$(MAKE) --no-print-directory lint
	@OME_VETTED=1 hack/test.sh

## unit: go vet, then the unit tests (every package outside test/, none of
## which starts a control plane) with -short, which trims the longest
## randomized comparisons (without go test's own vet, which would repeat a
## part of go vet's). The warm time is in docs/performance.md.
unit:
	$(GO) vet $(PKGS)
	$(GO) test -vet=off -short -count=1 $$($(GO) list $(PKGS) | grep -v /test/)

## demo: the local control plane with Kueue and the guide's cluster; Ctrl-C stops it.
demo: tools
	$(GO) run ./test/cmd/localcluster up --demo

## demo-fleet: a management plane and two member clusters, each its own
## control plane, the members with Kueue and a workload manager, joined
## through ClusterProfiles, with a small fleet tree; Ctrl-C stops it.
demo-fleet: tools
	$(GO) run ./test/cmd/localcluster fleet

## image: the container image as a tarball, without a Docker daemon:
## bin/ome-quota-manager-$(GOARCH).tar (OCI layout plus Docker's manifest.json,
## for docker load, podman load or crane push). GOARCH=amd64|arm64, IMAGE=ref.
## It holds the manager and the ClusterProfile secret-reader credential plugin
## (sigs.k8s.io/cluster-inventory-api, at the version go.mod requires).
IMAGE_ARCH := $(or $(GOARCH),$(shell $(GO) env GOARCH))
IMAGE ?= ome-quota-manager:dev
IMAGE_DIR ?= bin
image:
	@mkdir -p $(IMAGE_DIR)/image-$(IMAGE_ARCH)
	GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -ldflags="-s -w" \
	  -o $(IMAGE_DIR)/image-$(IMAGE_ARCH)/ome-quota-manager ./cmd/ome-quota-manager
	GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -ldflags="-s -w" \
	  -o $(IMAGE_DIR)/image-$(IMAGE_ARCH)/secretreader-plugin sigs.k8s.io/cluster-inventory-api/cmd/secretreader-plugin
	cp Dockerfile $(IMAGE_DIR)/image-$(IMAGE_ARCH)/Dockerfile
	cd hack/image && env -u GOOS -u GOARCH $(GO) run . -arch $(IMAGE_ARCH) -tag $(IMAGE) \
	  -binary $(abspath $(IMAGE_DIR))/image-$(IMAGE_ARCH)/ome-quota-manager \
	  -plugin $(abspath $(IMAGE_DIR))/image-$(IMAGE_ARCH)/secretreader-plugin \
	  -o $(abspath $(IMAGE_DIR))/ome-quota-manager-$(IMAGE_ARCH).tar
	@echo "image $(IMAGE) for linux/$(IMAGE_ARCH): $(IMAGE_DIR)/ome-quota-manager-$(IMAGE_ARCH).tar"

## generate: the CRD, deepcopy functions and typed client (api/client) from api/v1beta1;
## docs/metrics.md from the metrics catalog; the chart's Grafana dashboard JSON.
CLIENT_PKG := ome.io/quota-manager/api/client
GEN_FLAGS := --go-header-file hack/boilerplate.go.txt
generate:
	$(GO) tool controller-gen object crd:crdVersions=v1 paths=./api/v1beta1/ output:crd:dir=config/crd
	$(GO) run ./hack/boundquantities config/crd/ome.io_acceleratorquotas.yaml
	cp config/crd/ome.io_acceleratorquotas.yaml config/crd/ome.io_admissionledgers.yaml charts/ome-quota-manager/files/
	rm -rf api/client/applyconfiguration api/client/clientset api/client/informers api/client/listers
	$(GO) tool applyconfiguration-gen $(GEN_FLAGS) --output-dir api/client/applyconfiguration \
	  --output-pkg $(CLIENT_PKG)/applyconfiguration ./api/v1beta1
	$(GO) tool client-gen $(GEN_FLAGS) --fake-clientset=false --clientset-name versioned \
	  --input-base ome.io/quota-manager --input api/v1beta1 \
	  --apply-configuration-package $(CLIENT_PKG)/applyconfiguration \
	  --output-dir api/client/clientset --output-pkg $(CLIENT_PKG)/clientset
	$(GO) tool lister-gen $(GEN_FLAGS) --output-dir api/client/listers \
	  --output-pkg $(CLIENT_PKG)/listers ./api/v1beta1
	$(GO) tool informer-gen $(GEN_FLAGS) --output-dir api/client/informers \
	  --output-pkg $(CLIENT_PKG)/informers \
	  --versioned-clientset-package $(CLIENT_PKG)/clientset/versioned \
	  --listers-package $(CLIENT_PKG)/listers ./api/v1beta1
	$(GO) run ./hack/observability

## plugin: bin/kubectl-ome for this machine.
plugin:
	@hack/plugin.sh

## plugin-krew: bin/kubectl-ome, and krew archives for four platforms with
## dist/ome.yaml (VERSION=v1.2.3 to name a release).
plugin-krew:
	@hack/plugin.sh krew

## lint: gofmt and go vet.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## fuzz: a longer fuzz run of the core (FUZZTIME=10m by default).
FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzApply -fuzztime $(FUZZTIME) -fuzzminimizetime 10s ./state/

## perf: the manager against a bare client on the local control plane, T21k;
## QUICK=1 runs a small tree. How long each takes: docs/performance.md.
perf: tools
	$(GO) run ./test/cmd/perf $(if $(QUICK),-quick)

## fleet-bench: a management plane with 20 live member API servers;
## figures and how long it takes: docs/performance.md.
fleet-bench: tools
	$(GO) run ./test/cmd/fleetbench

## bench: the core's per-event benchmarks.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./state/
