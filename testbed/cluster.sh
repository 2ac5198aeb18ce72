#!/usr/bin/env bash
# The testbed's lifecycle, behind `./run.sh cluster up [--chain] | down | status`.
#   up      builds what is missing, starts the launcher detached (own session), waits until the API server is
#           ready and the JobSet webhook answers, and prints the admin kubeconfig path as the last stdout line.
#           A running testbed is reused.
#           --chain: the launcher also runs Trainer in-process; once it is ready, kube-scheduler (+ Coscheduling),
#           podgroup-controller and kwok start (each detached, a log each, pids in chain.pids) and simnodes makes
#           the nodes of ${KAI_FN_TESTBED_NODES:-4x8} (pool gpu-node).
#   down    stops the launcher and everything it started; nothing outlives it.
#   status  reports each component; exit 0 only if the testbed is up and ready.
# State: ${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed} (kubeconfig, pids, ready, one log per component).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
state=${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed}
crds=${KAI_FN_CRDS_DIR:-$repo/../shared/crds}
up_timeout=${KAI_FN_TESTBED_UP_TIMEOUT:-600}

say() { echo "cluster: $*" >&2; }

# alive <pid>: running, and not a zombie (a killed launcher stays one until its reaper gets to it).
alive() {
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
  [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

launcher_pid() { cat "$state/launcher.pid" 2>/dev/null || true; }

# pid_is <pid> <name>: the pid still belongs to that program (pids get reused).
pid_is() {
  local comm
  comm=$(cat "/proc/$1/comm" 2>/dev/null) || return 1
  [[ "$2" == "$comm"* ]]
}

kubectl_() { "$(sed -n 's/^kubectl=//p' "$state/bin.env")" --kubeconfig "$state/kubeconfig" "$@"; }

api_ready() { [ "$(kubectl_ get --raw /readyz 2>/dev/null)" = ok ]; }

fail() {
  local why
  why=$(cat "$state/failure" 2>/dev/null || echo "launcher exited early (log: $state/launcher.log)")
  say "FAILED: $why"
  local log
  log=$(sed -n 's/.*(log: \(.*\))$/\1/p' <<<"$why")
  [ -n "$log" ] && [ -f "$log" ] && { say "last lines of $log:"; tail -n 15 "$log" >&2; }
  down >/dev/null 2>&1 || true
  exit 1
}

wait_ready() {
  local pid=$1 start=$SECONDS next=$((SECONDS + 15))
  while [ ! -f "$state/ready" ]; do
    alive "$pid" || fail
    (( SECONDS - start < up_timeout )) || { echo "launcher: not ready after ${up_timeout}s (log: $state/launcher.log)" >"$state/failure"; fail; }
    if (( SECONDS >= next )); then
      next=$((next + 15))
      say "starting, $((SECONDS - start))s elapsed (logs in $state)"
    fi
    sleep 0.5
  done
  api_ready || { echo "kube-apiserver: /readyz is not ok (log: $state/kube-apiserver.log)" >"$state/failure"; fail; }
}

up() {
  local chain=false
  [ "${1:-}" = --chain ] && chain=true
  local pid
  pid=$(launcher_pid)
  if alive "$pid" && pid_is "$pid" launcher; then
    if ! grep -qx "chain $chain" "$state/ready" 2>/dev/null && [ -f "$state/ready" ]; then
      say "a testbed with chain=$(sed -n 's/^chain //p' "$state/ready") is running; run ./run.sh cluster down first"
      exit 1
    fi
    say "reusing the running testbed (pid $pid)"
    wait_ready "$pid"
    $chain && start_chain
    echo "$state/kubeconfig"
    return
  fi
  down >/dev/null 2>&1 || true
  [ -d "$crds" ] || { say "CRD directory $crds is missing (set KAI_FN_CRDS_DIR)"; exit 1; }
  mkdir -p "$state"
  local paths
  local build=(etcd kube-apiserver kube-controller-manager kubectl launcher)
  $chain && build+=(scheduler kwok eventing)
  paths=$("$here/build.sh" "${build[@]}") \
    || { say "FAILED: build (see the build.sh lines above)"; exit 1; }
  echo "$paths" >"$state/bin.env"
  get() { sed -n "s/^$1=//p" <<<"$paths"; }
  local args=(--state-dir "$state" --crds "$(cd "$crds" && pwd)" --kube-apiserver "$(get kube-apiserver)"
    --etcd "$(get etcd)" --kube-controller-manager "$(get kube-controller-manager)")
  $chain && args+=(--chain)
  rm -f "$state/failure" "$state/ready"
  setsid "$(get launcher)" "${args[@]}" </dev/null >"$state/launcher.log" 2>&1 &
  pid=$!
  echo "$pid" >"$state/launcher.pid"
  say "starting the testbed (launcher pid $pid, chain=$chain)"
  wait_ready "$pid"
  $chain && start_chain
  say "ready: $(sed -n 's/^api //p' "$state/ready")"
  echo "$state/kubeconfig"
}

# The chain's scheduling side, started after the launcher is ready; what runs already is kept.
start_chain() {
  local sched kwok name p
  sched=$(sed -n 's/^scheduler=//p' "$state/bin.env")
  kwok=$(sed -n 's/^kwok=//p' "$state/bin.env")
  [ -n "$sched" ] && [ -n "$kwok" ] || { echo "bin.env names no scheduler/kwok (log: $state/launcher.log)" >"$state/failure"; fail; }
  export KUBECONFIG=$state/kubeconfig KAI_FN_TESTBED_DIR=$state
  touch "$state/chain.pids"
  start_one() { # start_one NAME COMMAND...: detached, own session, log NAME.log
    while read -r name p; do
      [ "$name" = "$1" ] && alive "$p" && pid_is "$p" "$1" && return 0
    done <"$state/chain.pids"
    setsid "${@:2}" </dev/null >"$state/$1.log" 2>&1 &
    echo "$1 $!" >>"$state/chain.pids"
  }
  start_one kube-scheduler "$here/scheduler/start.sh" "$sched"
  start_one podgroup-controller "$sched/podgroup-controller" --kubeconfig="$KUBECONFIG"
  start_one kwok "$here/kwok/start.sh" "$kwok/kwok"
  "$kwok/simnodes" "${KAI_FN_TESTBED_NODES:-4x8}" >>"$state/simnodes.log" 2>&1 ||
    { echo "simnodes: could not make the nodes ${KAI_FN_TESTBED_NODES:-4x8} (log: $state/simnodes.log)" >"$state/failure"; fail; }
  sleep 1
  while read -r name p; do
    alive "$p" || { echo "$name exited at start-up (log: $state/$name.log)" >"$state/failure"; fail; }
  done <"$state/chain.pids"
  say "chain: kube-scheduler, podgroup-controller, kwok running; nodes ${KAI_FN_TESTBED_NODES:-4x8}"
}

stop_chain() {
  local name p
  [ -f "$state/chain.pids" ] || return 0
  while read -r name p; do
    alive "$p" && pid_is "$p" "$name" && kill -TERM "$p" 2>/dev/null
  done <"$state/chain.pids"
  for _ in $(seq 1 20); do
    local left=false
    while read -r name p; do alive "$p" && pid_is "$p" "$name" && left=true; done <"$state/chain.pids"
    $left || break
    sleep 0.25
  done
  while read -r name p; do
    alive "$p" && pid_is "$p" "$name" && kill -KILL "$p" 2>/dev/null
  done <"$state/chain.pids"
  rm -f "$state/chain.pids"
}

down() {
  local pid name p
  stop_chain
  pid=$(launcher_pid)
  if alive "$pid" && pid_is "$pid" launcher; then
    kill -TERM "$pid"
    for _ in $(seq 1 120); do alive "$pid" || break; sleep 0.5; done
    alive "$pid" && kill -KILL -- "-$pid" 2>/dev/null
  fi
  # Whatever the launcher could not stop (it was killed, or hung) goes now.
  if [ -f "$state/pids" ]; then
    while read -r name p; do
      if alive "$p" && pid_is "$p" "$name"; then
        say "stopping leftover $name (pid $p)"
        kill -KILL "$p" 2>/dev/null || true
      fi
    done <"$state/pids"
  fi
  rm -f "$state/launcher.pid" "$state/pids" "$state/ready"
  say "stopped"
}

status() {
  local pid name p ok=0
  pid=$(launcher_pid)
  if ! alive "$pid"; then
    echo "testbed: not running (state: $state)"
    [ -f "$state/failure" ] && echo "last failure: $(cat "$state/failure")"
    if [ -f "$state/pids" ]; then
      while read -r name p; do
        alive "$p" && pid_is "$p" "$name" && echo "  leftover $name (pid $p): ./run.sh cluster down stops it"
      done <"$state/pids"
    fi
    return 3
  fi
  [ -f "$state/ready" ] && echo "testbed: ready, $(tr '\n' ' ' <"$state/ready")" || { echo "testbed: starting"; ok=1; }
  for pids in "$state/pids" "$state/chain.pids"; do
    [ -f "$pids" ] || continue
    while read -r name p; do
      if alive "$p" && pid_is "$p" "$name"; then
        echo "  $name: running (pid $p, log $state/$name.log)"
      else
        echo "  $name: NOT running (log $state/$name.log)"; ok=1
      fi
    done <"$pids"
  done
  echo "  jobset controllers+webhooks: in-process in the launcher (log $state/launcher.log)"
  if [ -f "$state/ready" ]; then
    if api_ready; then echo "  kube-apiserver /readyz: ok"; else echo "  kube-apiserver /readyz: NOT ok"; ok=1; fi
    echo "  kubeconfig: $state/kubeconfig"
  fi
  return $ok
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  *) echo "usage: ./run.sh cluster up [--chain] | down | status" >&2; exit 2 ;;
esac
