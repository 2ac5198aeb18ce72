#!/usr/bin/env bash
# Builds knvalidate (Knative's own Validate()) once per version key; prints the binary's path as the last stdout line.
# Cache: ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/knvalidate-<key>/knvalidate, key = the serving and eventing versions
# + a hash of this module's sources, so a warm run builds nothing and any change to go.mod, go.sum or the code rebuilds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "knvalidate: go is not installed" >&2; exit 3; }
serving="$(awk '$1 == "knative.dev/serving" {print $2}' "$here/go.mod")"
eventing="$(awk '$1 == "knative.dev/eventing" {print $2}' "$here/go.mod")"
sources="$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)"
dir="${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/knvalidate-serving-${serving}-eventing-${eventing}-${sources}"
if [[ ! -x "$dir/knvalidate" ]]; then
  echo "knvalidate: building against knative.dev/serving ${serving}, knative.dev/eventing ${eventing} (cold: several minutes) ..." >&2
  mkdir -p "$dir"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/knvalidate.tmp" .)
  # Eventing's installed defaults (broker class, feature flags), which its webhook reads from these ConfigMaps.
  mkdir -p "$dir/config"
  eventing_dir="$(cd "$here" && go list -m -f '{{.Dir}}' knative.dev/eventing)"
  cp "$eventing_dir/config/core/configmaps/default-broker.yaml" "$eventing_dir/config/core/configmaps/features.yaml" \
    "$dir/config/"
  chmod u+w "$dir/config/"*.yaml
  mv "$dir/knvalidate.tmp" "$dir/knvalidate"
  echo "knvalidate: built $dir/knvalidate" >&2
fi
echo "$dir/knvalidate"
