#!/usr/bin/env bash
# Builds kube-scheduler (with scheduler-plugins' Coscheduling) and podgroup-controller once per version key,
# under ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/scheduler-<key>/. Prints that directory as the last line.
set -euo pipefail
cd "$(dirname "$0")"
k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
sp=$(go list -m -f '{{.Version}}' sigs.k8s.io/scheduler-plugins)
src=$(cat go.mod go.sum $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-8)
out=${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/scheduler-k8s-$k8s-sp-$sp-$src
if [ ! -x "$out/kube-scheduler" ] || [ ! -x "$out/podgroup-controller" ]; then
  echo "building kube-scheduler + Coscheduling, podgroup-controller (k8s $k8s, scheduler-plugins $sp)..." >&2
  start=$SECONDS
  mkdir -p "$(dirname "$out")"
  tmp=$(mktemp -d "$out.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  go build -o "$tmp/" ./cmd/kube-scheduler ./cmd/podgroup-controller
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "built in $((SECONDS - start))s: $out" >&2
fi
echo "$out"
