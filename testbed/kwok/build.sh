#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok/cmd/kwok, a tool of this module) and simnodes once per key, under
#   ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kwok-<kwok version>-<hash>/
# with testbed/build.sh's flags. Progress goes to stderr; the directory is the last stdout line.
set -euo pipefail
cd "$(dirname "$0")"
kwok=$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
hash=$({ go env GOVERSION; cat build.sh go.mod go.sum; find cmd -name '*.go' | LC_ALL=C sort | xargs cat; } |
  sha256sum | cut -c1-12)
out=${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kwok-$kwok-$hash
if [ ! -x "$out/kwok" ] || [ ! -x "$out/simnodes" ]; then
  echo "kwok: building kwok $kwok and simnodes (cold builds take minutes)" >&2
  start=$SECONDS
  mkdir -p "$(dirname "$out")"
  tmp=$(mktemp -d "$out.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  CGO_ENABLED=0 nice -n "${KAI_FN_BUILD_NICE:-10}" go build -mod=readonly -trimpath -ldflags "-s -w" \
    -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok ./cmd/simnodes
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "kwok: built in $((SECONDS - start))s: $out" >&2
fi
echo "$out"
