#!/usr/bin/env bash
# The testbed's lifecycle, behind `./run.sh cluster up [--chain [--without-kai-fn]] | down | status`.
#   up      builds what is missing, starts the launcher detached (own session), waits until the API server is
#           ready and the JobSet webhook answers, and prints the admin kubeconfig path as the last stdout line.
#           A running testbed is reused.
#           --chain: the launcher also runs Trainer in-process and installs the chain's CRDs (KAI's from the KAI
#           version built); once it is ready, kube-scheduler (+ Coscheduling), podgroup-controller, kwok and KAI
#           Scheduler's scheduler, binder, podgroupcontroller, queuecontroller and podgrouper start (each
#           detached, a log each, pids in chain.pids), simnodes makes the nodes of ${KAI_FN_TESTBED_NODES:-4x8}
#           (pool gpu-node), KAI's default queues are created, and kai_fn is deployed in the kai flavor
#           (python -m kai_fn.local.chain serve: its RBAC, the admission policy, the function, its sources).
#           --without-kai-fn: all of that but kai_fn, for tests that run their own.
#   down    stops the launcher and everything it started; nothing outlives it.
#   status  reports each component; exit 0 only if the testbed is up and ready.
# State: ${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed} (kubeconfig, pids, ready, one log per component).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
state=${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed}
crds=${KAI_FN_CRDS_DIR:-$repo/../shared/crds}
up_timeout=${KAI_FN_TESTBED_UP_TIMEOUT:-600}
python=${KAI_FN_PYTHON:-$repo/.venv/bin/python}

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
  local chain=false kai_fn=true arg
  for arg in "$@"; do
    case $arg in
      --chain) chain=true ;;
      --without-kai-fn) kai_fn=false ;;
      *) echo "usage: ./run.sh cluster up [--chain [--without-kai-fn]]" >&2; exit 2 ;;
    esac
  done
  $chain || kai_fn=false
  local pid
  pid=$(launcher_pid)
  if alive "$pid" && pid_is "$pid" launcher; then
    if ! grep -qx "chain $chain" "$state/ready" 2>/dev/null && [ -f "$state/ready" ]; then
      say "a testbed with chain=$(sed -n 's/^chain //p' "$state/ready") is running; run ./run.sh cluster down first"
      exit 1
    fi
    if $chain && [ "$(cat "$state/kai-fn.wanted" 2>/dev/null || echo "$kai_fn")" != "$kai_fn" ]; then
      say "a chain $($kai_fn && echo without || echo with) kai_fn is running; run ./run.sh cluster down first"
      exit 1
    fi
    say "reusing the running testbed (pid $pid)"
    wait_ready "$pid"
    $chain && start_chain "$kai_fn"
    echo "$state/kubeconfig"
    return
  fi
  down >/dev/null 2>&1 || true
  [ -d "$crds" ] || { say "CRD directory $crds is missing (set KAI_FN_CRDS_DIR)"; exit 1; }
  mkdir -p "$state"
  local paths
  local build=(etcd kube-apiserver kube-controller-manager kubectl launcher)
  $chain && build+=(scheduler kwok kai eventing serving)
  paths=$("$here/build.sh" "${build[@]}") \
    || { say "FAILED: build (see the build.sh lines above)"; exit 1; }
  echo "$paths" >"$state/bin.env"
  get() { sed -n "s/^$1=//p" <<<"$paths"; }
  local crd_dir
  crd_dir=$(cd "$crds" && pwd)
  $chain && crd_dir=$(chain_crds "$(get kai)")
  local args=(--state-dir "$state" --crds "$crd_dir" --kube-apiserver "$(get kube-apiserver)"
    --etcd "$(get etcd)" --kube-controller-manager "$(get kube-controller-manager)")
  $chain && args+=(--chain)
  echo "$kai_fn" >"$state/kai-fn.wanted"
  rm -f "$state/failure" "$state/ready"
  setsid "$(get launcher)" "${args[@]}" </dev/null >"$state/launcher.log" 2>&1 &
  pid=$!
  echo "$pid" >"$state/launcher.pid"
  say "starting the testbed (launcher pid $pid, chain=$chain)"
  wait_ready "$pid"
  $chain && start_chain "$kai_fn"
  say "ready: $(sed -n 's/^api //p' "$state/ready")"
  echo "$state/kubeconfig"
}

# The chain's CRDs: every one of $crds but KAI's, which come from the KAI version that runs (build.sh kai copied
# them from its module: its PodGroup needs minMember >= 1, the copies in ../shared/crds are of a later commit).
chain_crds() {
  local out=$state/crds f
  rm -rf "$out"
  mkdir -p "$out"
  for f in "$crds"/*.yaml; do
    case ${f##*/} in scheduling.run.ai_*|kai.scheduler_*) ;; *) cp "$f" "$out/" ;; esac
  done
  cp "$1"/crds/*.yaml "$out/"
  echo "$out"
}

# chain.pids: one "name pid comm" line per process started detached; comm is what /proc says of it, so a reused
# pid is never taken for ours.
each_chain_pid() { # each_chain_pid FUNCTION: FUNCTION name pid comm, for each line
  local name p comm
  [ -f "$state/chain.pids" ] || return 0
  while read -r name p comm; do "$1" "$name" "$p" "${comm:-$name}"; done <"$state/chain.pids"
}

ours() { alive "$2" && pid_is "$2" "$3"; }

running_one() { # running_one NAME [any]: chain.pids names a live process of ours by that name (any: alive, whatever
  local n p comm  # it runs yet: a start script may not have exec'd its program)
  read -r n p comm < <(grep "^$1 " "$state/chain.pids" 2>/dev/null | tail -n 1) || return 1
  if [ "${2:-}" = any ]; then alive "$p"; else ours "$n" "$p" "${comm:-$n}"; fi
}

start_one() { # start_one NAME COMM COMMAND...: detached, own session, log NAME.log; kept if it runs
  running_one "$1" && return 0
  sed -i "/^$1 /d" "$state/chain.pids"
  setsid "${@:3}" </dev/null >"$state/$1.log" 2>&1 &
  echo "$1 $! $2" >>"$state/chain.pids"
}

# The chain's scheduling side, started after the launcher is ready; what runs already is kept.
start_chain() {
  local with_kai_fn=$1 sched kwok kai
  sched=$(sed -n 's/^scheduler=//p' "$state/bin.env")
  kwok=$(sed -n 's/^kwok=//p' "$state/bin.env")
  kai=$(sed -n 's/^kai=//p' "$state/bin.env")
  [ -n "$sched" ] && [ -n "$kwok" ] && [ -n "$kai" ] ||
    failed "bin.env names no scheduler/kwok/kai (log: $state/launcher.log)"
  export KUBECONFIG=$state/kubeconfig KAI_FN_TESTBED_DIR=$state
  touch "$state/chain.pids"
  start_one kube-scheduler kube-scheduler "$here/scheduler/start.sh" "$sched"
  start_one podgroup-controller podgroup-controller "$sched/podgroup-controller" --kubeconfig="$KUBECONFIG"
  start_one kwok kwok "$here/kwok/start.sh" "$kwok/kwok"
  local c started=(kube-scheduler podgroup-controller kwok)
  for c in scheduler binder podgroupcontroller queuecontroller podgrouper; do
    start_one "kai-$c" "$c" "$here/kai/start.sh" "$c" "$kai"
    started+=("kai-$c")
  done
  local nodes=${KAI_FN_TESTBED_NODES:-4x8}
  "$kwok/simnodes" "$nodes" >>"$state/simnodes.log" 2>&1 ||
    failed "simnodes: could not make the nodes $nodes (log: $state/simnodes.log)"
  kubectl_ apply --server-side --field-manager=kai-install -f "$kai/default-queues.yaml" \
    -f "$kai/priorityclasses.yaml" >>"$state/kai-install.log" 2>&1 ||
    failed "KAI's default queues and PriorityClasses could not be created (log: $state/kai-install.log)"
  sleep 1
  for c in "${started[@]}"; do running_one "$c" any || failed "$c exited at start-up (log: $state/$c.log)"; done
  say "chain: kube-scheduler, podgroup-controller, kwok, KAI (scheduler, binder, podgroupcontroller, queuecontroller,"
  say "  podgrouper) running; nodes $nodes; KAI's default queues and PriorityClasses"
  if [ "$with_kai_fn" = true ]; then start_kai_fn; fi
}

failed() { echo "$1" >"$state/failure"; fail; }

# kai_fn as an operator deploys it (kai_fn/local/chain.py): it writes kai-fn.ready once the function answers and
# its sources run, naming the function's pid, which goes into chain.pids too; it exits when its function does.
start_kai_fn() {
  [ -x "$python" ] || failed "kai-fn: no Python at $python (./run.sh cluster up makes .venv; or --without-kai-fn)"
  local ready=$state/kai-fn.ready p start=$SECONDS
  if running_one kai-fn && grep -q "^kai-fn-function " "$state/chain.pids" && ! running_one kai-fn-function; then
    say "kai_fn's function is down: starting kai_fn again"
    p=$(sed -n 's/^kai-fn \([0-9]*\) .*/\1/p' "$state/chain.pids" | tail -n 1)
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 1 60); do running_one kai-fn || break; sleep 0.25; done
    running_one kai-fn && kill -KILL "$p" 2>/dev/null
  fi
  if ! running_one kai-fn; then
    rm -f "$ready"
    sed -i '/^kai-fn-function /d' "$state/chain.pids"
  fi
  (cd "$repo" && start_one kai-fn "$(basename "$python")" "$python" -m kai_fn.local.chain serve \
    --kubeconfig "$state/kubeconfig" --flavor kai --log-dir "$state" --ready-file "$ready")
  while [ ! -f "$ready" ]; do
    running_one kai-fn any || failed "kai-fn exited at start-up (log: $state/kai-fn.log)"
    (( SECONDS - start < 180 )) || failed "kai-fn: not ready after 180s (log: $state/kai-fn.log)"
    sleep 0.5
  done
  p=$(sed -n 's/^function //p' "$ready")
  grep -q "^kai-fn-function $p " "$state/chain.pids" ||
    echo "kai-fn-function $p $(cat "/proc/$p/comm")" >>"$state/chain.pids"
  say "kai_fn: the function at $(sed -n 's/^url //p' "$ready"), the sources' sink $(sed -n 's/^sink //p' "$ready") (log $state/function.log), the policy"
}

stop_chain() {
  [ -f "$state/chain.pids" ] || return 0
  term() { ! ours "$@" || kill -TERM "$2" 2>/dev/null || true; }
  still() { ! ours "$@" || left=true; }
  kill9() { ! ours "$@" || kill -KILL "$2" 2>/dev/null || true; }
  each_chain_pid term
  local left
  for _ in $(seq 1 60); do # kai-fn stops its sources and removes the admission policy
    left=false
    each_chain_pid still
    $left || break
    sleep 0.25
  done
  each_chain_pid kill9
  rm -f "$state/chain.pids" "$state/kai-fn.ready"
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
  report() {
    local log=$state/$1.log
    [ "$1" = kai-fn-function ] && log=$state/function.log
    if ours "$@"; then echo "  $1: running (pid $2, log $log)"; else echo "  $1: NOT running (log $log)"; ok=1; fi
  }
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
  if [ -f "$state/pids" ]; then
    while read -r name p; do report "$name" "$p" "$name"; done <"$state/pids"
  fi
  each_chain_pid report
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
  *) echo "usage: ./run.sh cluster up [--chain [--without-kai-fn]] | down | status" >&2; exit 2 ;;
esac
