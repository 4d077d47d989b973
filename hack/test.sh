#!/usr/bin/env bash
# Runs every test (unit, integration, e2e). Each test package that needs a
# control plane starts its own in TestMain and stops it at the end. This
# script then checks that nothing was left behind: no process started from
# the cached binaries, and no file in the test's temporary folder, which is
# removed whatever the outcome.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Compile with hack/goflags.sh's flags, as the tools, `make image` and
# `make plugin` do, so that the tests, the binaries they build and those
# targets share one compile of each package (the Makefile's lint does the
# same). Under `make test` GOFLAGS already starts with them.
. "$root/hack/goflags.sh"
case " ${GOFLAGS:-} " in *" $OME_GOFLAGS "*) ;; *) export GOFLAGS="$OME_GOFLAGS${GOFLAGS:+ $GOFLAGS}" ;; esac
# `make test` runs go vet on every package, test files included and with all
# of vet's checks (lint), before this script and sets OME_VETTED; go test's
# own vet, a subset of those checks, would only repeat it.
vet=()
if [ "${OME_VETTED:-}" = 1 ]; then vet=(-vet=off); fi
bin=$("$root/hack/tools.sh") || exit 1
# It holds helm (test/helm, test/fleet), prometheus and promtool (the alert
# rules' tests, test/observability, test/fleet) with the rest.
export OME_TOOLS_DIR=$bin

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ome-test.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
export TMPDIR=$tmp

# rc is the run's exit code: the first failure's. keep CODE keeps CODE
# unless a failure came before; collect PID FILE TITLE waits for a job
# started in the background, prints its output under TITLE, and keeps its
# code.
rc=0
keep() { if [ "$rc" -eq 0 ]; then rc=$1; fi; }
collect() {
  wait "$1"
  local code=$?
  echo "--- $3 ---"
  cat "$2"
  keep "$code"
}

cd "$root"
if [ $# -eq 0 ] || [ "$*" = "./..." ]; then
  # The binaries the control-plane packages start (the manager, the
  # ClusterProfile secret-reader plugin, kubectl-ome), linked once for the
  # run: each package copies them from $OME_BUILT_DIR instead of linking
  # its own (test/localcluster's build).
  if mkdir -p "$tmp/built" && go build -o "$tmp/built/" ./cmd/ome-quota-manager ./cmd/kubectl-ome \
    sigs.k8s.io/cluster-inventory-api/cmd/secretreader-plugin; then
    export OME_BUILT_DIR=$tmp/built
  else
    keep 1
  fi
  # The guide once more on OME's own AcceleratorQuota CRD, which the
  # guide's cluster has from OME's ome-crd chart (test/e2e/main_test.go),
  # and the quick form of `make perf`, run to keep the command working
  # (its figures are not judged here). Each starts one control plane at a
  # time and mostly waits on it, so they run beside the unit tests, which
  # start none and run at nice 10: the two get the CPU when they need it,
  # and the unit tests' compile and runs take the rest. They are not run
  # beside the control-plane packages below: with six control planes at
  # once on 2 cores, tests that check that nothing waits in vain see
  # stalls of a second.
  OME_E2E_CRD=ome go test "${vet[@]}" -count=1 -timeout 15m -run 'TestGuide$|TestOMECRD' ./test/e2e >"$tmp/e2e-ome.out" 2>&1 &
  e2e_pid=$!
  go run ./test/cmd/perf -quick >"$tmp/perf.out" 2>&1 &
  perf_pid=$!
  # Unit tests, in parallel.
  nice -n 10 go test "${vet[@]}" -count=1 -timeout 20m $(go list ./... | grep -v '/test/')
  keep $?
  collect "$perf_pid" "$tmp/perf.out" "perf -quick (beside the unit tests)"
  collect "$e2e_pid" "$tmp/e2e-ome.out" "the guide on OME's CRD (OME_E2E_CRD=ome ./test/e2e, beside the unit tests)"
  # test/image runs `make image` for amd64 and arm64. The arm64 compile
  # shares no package with the rest of the run (several minutes cold),
  # and test/image starts no control plane, so it runs beside the control
  # planes' packages at the lowest CPU priority: it takes the CPU their
  # waits leave idle, and gives way whenever they need it.
  nice -n 19 go test "${vet[@]}" -count=1 -timeout 30m ./test/image >"$tmp/image.out" 2>&1 &
  image_pid=$!
  # The packages that start control planes, two at a time: most of their
  # time is spent waiting (for an API server, Kueue, an informer, a
  # lease), which the other package fills. Each starts its own control
  # planes, on ports it picks, under its own folder of $TMPDIR. The
  # longest first (their times are in docs/performance.md), so that the
  # two slots end together instead of one running a long package alone at
  # the end; the rest follow in go list's order.
  long="webhook fleet impact failures e2e helm observability plugin pods dra"
  pkgs=()
  for p in $long; do pkgs+=("./test/$p"); done
  for p in $(go list ./test/...); do
    case " $long image " in *" ${p#ome.io/quota-manager/test/} "*) ;; *) pkgs+=("$p") ;; esac
  done
  go test "${vet[@]}" -count=1 -p 2 -timeout 30m "${pkgs[@]}"
  keep $?
  collect "$image_pid" "$tmp/image.out" "make image for amd64 and arm64 (./test/image, at nice 19 beside the packages)"
else
  go test "${vet[@]}" -count=1 -timeout 30m "$@"
  keep $?
fi

# Anything of this run still running is a leak: every process the tests
# start (etcd, kube-apiserver, Kueue, managers) has this run's temporary
# folder on its command line. Processes of the cached binaries started by
# another run at the same time are not this run's to judge or kill. Give
# processes a moment to act on the signal their parent's exit sent them.
sleep 1
# Managers run from binaries built under $tmp.
leaked=$(pgrep -af "$tmp/" || true)
if [ -n "$leaked" ]; then
  echo "FAIL: processes left behind by the tests:"
  echo "$leaked"
  pkill -KILL -f "$tmp/" || true
  rc=1
fi
left=$(find "$tmp" -mindepth 1 -maxdepth 1 -name 'ome-localcluster-*' 2>/dev/null)
if [ -n "$left" ]; then
  echo "FAIL: control plane folders left behind: $left"
  rc=1
fi
exit $rc
