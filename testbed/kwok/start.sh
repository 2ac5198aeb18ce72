#!/usr/bin/env bash
# Runs kwok in the foreground against $KUBECONFIG: ./start.sh KWOK_BINARY
# Stages: kwok's own node-initialize, pod-ready and pod-delete (kustomize/stage in the kwok module, read from the
# module cache), and stages/pod-complete-initializers.yaml and stages/pod-complete-after.yaml. Manages only nodes
# annotated kwok.x-k8s.io/node=fake (what simnodes creates). Pod IPs come from 10.244.0.0/16, away from envtest's
# 10.0.0.0/24.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: start.sh KWOK_BINARY}
: "${KUBECONFIG:?KUBECONFIG must name the admin kubeconfig of the testbed}"
stages=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
exec "$bin" --kubeconfig="$KUBECONFIG" \
  --config="$stages/node/fast/node-initialize.yaml" \
  --config="$stages/pod/fast/pod-ready.yaml" \
  --config="$stages/pod/fast/pod-delete.yaml" \
  --config="$here/stages/pod-complete-initializers.yaml" \
  --config="$here/stages/pod-complete-after.yaml" \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --cidr=10.244.0.0/16 --node-ip=10.245.0.1
