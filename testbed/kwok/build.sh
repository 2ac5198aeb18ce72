#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok/cmd/kwok, a tool of this module) and simnodes once per version key,
# under ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kwok-<key>/. Prints that directory as the last line.
set -euo pipefail
cd "$(dirname "$0")"
kwok=$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
src=$(cat go.mod go.sum $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-8)
out=${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kwok-$kwok-$src
if [ ! -x "$out/kwok" ] || [ ! -x "$out/simnodes" ]; then
  echo "building kwok $kwok and simnodes..." >&2
  start=$SECONDS
  mkdir -p "$(dirname "$out")"
  tmp=$(mktemp -d "$out.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  go build -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok ./cmd/simnodes
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "built in $((SECONDS - start))s: $out" >&2
fi
echo "$out"
