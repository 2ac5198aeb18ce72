#!/usr/bin/env bash
# Builds KAI's podgrouper oracle once per version key and prints the binary's path as the last line of stdout.
# Cache: ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kaioracle-<key>/kaioracle, key = KAI's version + a hash of this
# module's sources, so a warm run builds nothing and any change to go.mod, go.sum or the code rebuilds. KAI's module
# comes from the file-based proxy in ../shared/goproxy, as for testbed/kai (testbed/kai/README.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "kaioracle: go is not installed" >&2; exit 3; }
module=github.com/kai-scheduler/KAI-scheduler
kai="$(awk -v m="$module" '$1 == "require" && $2 == m {print $3} $1 == m {print $2}' "$here/go.mod")"
sources="$(cd "$here" && { go env GOVERSION; cat go.mod go.sum ./*.go; } | sha256sum | cut -c1-12)"
dir="${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kaioracle-kai-${kai}-${sources}"
if [[ ! -x "$dir/kaioracle" ]]; then
  proxy="${KAI_FN_GOPROXY_DIR:-$here/../../../shared/goproxy}"
  [[ -d "$proxy" ]] || { echo "kaioracle: no Go module proxy at $proxy (it serves $module; set KAI_FN_GOPROXY_DIR)" >&2; exit 1; }
  echo "kaioracle: building against $module ${kai} (cold: several minutes) ..." >&2
  mkdir -p "$dir"
  (cd "$here" && GOPROXY="file://$(cd "$proxy" && pwd),$(go env GOPROXY)" GONOSUMDB="$module" CGO_ENABLED=0 \
    nice -n "${KAI_FN_BUILD_NICE:-10}" go build -mod=readonly -trimpath -ldflags "-s -w" -o "$dir/kaioracle.tmp" .)
  mv "$dir/kaioracle.tmp" "$dir/kaioracle"
  echo "kaioracle: built $dir/kaioracle" >&2
fi
echo "$dir/kaioracle"
