#!/usr/bin/env bash
# Runs one KAI Scheduler component in the foreground against $KUBECONFIG: ./start.sh COMPONENT BIN_DIR [ARGS...]
# (BIN_DIR from `build.sh kai`; ARGS are added, e.g. a node pool's scheduler shard: --partition-label-value=POOL). As an install runs them, minus what a testbed cannot hold: webhooks off, leader
# election off, every server off or on a free loopback port (other testbeds share this machine; KAI's defaults
# are :8080, :8081 and 127.0.0.1:8081). The command line is the log's first line.
set -euo pipefail
component=${1:?usage: start.sh scheduler|binder|podgroupcontroller|queuecontroller|podgrouper BIN_DIR}
bin=${2:?usage: start.sh COMPONENT BIN_DIR}
: "${KUBECONFIG:?KUBECONFIG must name the admin kubeconfig of the testbed}"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

case $component in
  # The scheduler has no --kubeconfig flag and no way to turn its metrics server off. Its staleness grace period
  # (KAI's default 60s) is ${KAI_FN_TESTBED_STALENESS_GRACE:-10s} here, so the staleness scenarios take seconds; its
  # cycle is KAI's default (1s) unless ${KAI_FN_TESTBED_SCHEDULE_PERIOD} says otherwise (BENCHMARKS.md).
  scheduler) args=(--scheduler-name=kai-scheduler --leader-elect=false
               --listen-address="127.0.0.1:$(free_port)" --plugin-server-port="$(free_port)"
               --default-staleness-grace-period="${KAI_FN_TESTBED_STALENESS_GRACE:-10s}"
               --schedule-period="${KAI_FN_TESTBED_SCHEDULE_PERIOD:-1s}") ;;
  binder) args=(--scheduler-name=kai-scheduler --leader-elect=false
            --metrics-bind-address=0 --health-probe-bind-address=0) ;;
  # Its metrics server is off at build time (build.sh: it ignores --metrics-bind-address). It also reads its
  # --log-level before parsing flags (always debug, megabytes a run): zap's own flag sets the level.
  podgroupcontroller) args=(--scheduler-name=kai-scheduler --leader-elect=false --enable-podgroup-webhook=false
                        --health-probe-bind-address=0 --zap-log-level=info) ;;
  queuecontroller) args=(--leader-elect=false --enable-webhook=false --metrics-listen-address=0) ;;
  podgrouper) args=(--scheduler-name=kai-scheduler --leader-elect=false
                --metrics-bind-address=0 --health-probe-bind-address=0 --zap-log-level=info) ;;
  *) echo "start.sh: unknown KAI component '$component'" >&2; exit 2 ;;
esac
args+=("${@:3}")
echo "+ $bin/$component ${args[*]}"
exec "$bin/$component" "${args[@]}"
