#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok/cmd/kwok, a tool of this module) and simnodes through testbed/build.sh:
#   ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/kwok-<kwok version>-<hash>/
# Progress goes to stderr; the directory is the last stdout line.
set -euo pipefail
"$(dirname "$0")/../build.sh" kwok | sed -n 's/^kwok=//p'
