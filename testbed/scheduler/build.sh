#!/usr/bin/env bash
# Builds kube-scheduler (with scheduler-plugins' Coscheduling) and podgroup-controller once per key, under
#   ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/scheduler-<k8s>-<scheduler-plugins>-<hash>/
# with testbed/build.sh's flags (CGO off, -trimpath), so the k8s packages come from the same build cache as
# testbed/kube's. Progress goes to stderr; the directory is the last stdout line.
set -euo pipefail
cd "$(dirname "$0")"
k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
sp=$(go list -m -f '{{.Version}}' sigs.k8s.io/scheduler-plugins)
hash=$({ go env GOVERSION; cat build.sh go.mod go.sum; find cmd -name '*.go' | LC_ALL=C sort | xargs cat; } |
  sha256sum | cut -c1-12)
out=${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/scheduler-$k8s-$sp-$hash
if [ ! -x "$out/kube-scheduler" ] || [ ! -x "$out/podgroup-controller" ]; then
  echo "scheduler: building kube-scheduler + Coscheduling and podgroup-controller (k8s $k8s, scheduler-plugins $sp;" \
    "cold builds take minutes)" >&2
  start=$SECONDS
  mkdir -p "$(dirname "$out")"
  tmp=$(mktemp -d "$out.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  minor=${k8s#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  CGO_ENABLED=0 nice -n "${KAI_FN_BUILD_NICE:-10}" go build -mod=readonly -trimpath -ldflags "$ldflags" \
    -o "$tmp/" ./cmd/kube-scheduler ./cmd/podgroup-controller
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "scheduler: built in $((SECONDS - start))s: $out" >&2
fi
echo "$out"
