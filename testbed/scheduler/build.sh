#!/usr/bin/env bash
# Builds kube-scheduler (with scheduler-plugins' Coscheduling) and podgroup-controller through testbed/build.sh:
#   ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/scheduler-<k8s>-<scheduler-plugins>-<hash>/
# Progress goes to stderr; the directory is the last stdout line.
set -euo pipefail
"$(dirname "$0")/../build.sh" scheduler | sed -n 's/^scheduler=//p'
