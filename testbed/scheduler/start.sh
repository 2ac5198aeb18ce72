#!/usr/bin/env bash
# Runs the chain's kube-scheduler in the foreground against $KUBECONFIG: ./start.sh BIN_DIR (from build.sh).
# kube-scheduler ignores --kubeconfig once given --config, so the kubeconfig path goes into a copy of
# scheduler-config.yaml in the state dir. On --pod-max-in-unschedulable-pods-duration see README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: start.sh BIN_DIR}
: "${KUBECONFIG:?KUBECONFIG must name the admin kubeconfig of the testbed}"
state=${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed}
mkdir -p "$state"
config=$state/scheduler-config.yaml
{ printf 'clientConnection:\n  kubeconfig: "%s"\n' "$KUBECONFIG"; cat "$here/scheduler-config.yaml"; } >"$config"
exec "$bin/kube-scheduler" --config="$config" --secure-port=0 --pod-max-in-unschedulable-pods-duration=10s
