#!/usr/bin/env bash
# Builds the Trainer oracle once per version key and prints the binary's path as the last line of stdout.
# Cache: ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/oracle-<key>/oracle, key = Trainer's version + a hash of this
# module's sources, so a warm run builds nothing and any change to go.mod, go.sum or the code rebuilds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "oracle: go is not installed" >&2; exit 3; }
trainer="$(awk '$1 == "github.com/kubeflow/trainer/v2" {print $2}' "$here/go.mod")"
sources="$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)"
dir="${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/oracle-trainer-${trainer}-${sources}"
if [[ ! -x "$dir/oracle" ]]; then
  echo "oracle: building against github.com/kubeflow/trainer/v2 ${trainer} (cold: several minutes) ..." >&2
  mkdir -p "$dir"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/oracle.tmp" .)
  mv "$dir/oracle.tmp" "$dir/oracle"
  echo "oracle: built $dir/oracle" >&2
fi
echo "$dir/oracle"
