#!/usr/bin/env bash
# All-or-nothing by hand, on a running testbed: ./check-gang.sh KUBECONFIG
# Starts kube-scheduler (+ Coscheduling), podgroup-controller and kwok against the testbed, then:
#   1. 3 nodes x 8 GPUs, a PodGroup of minMember 4 and 4 pods of 8 GPUs for scheduler-plugins-scheduler: none binds;
#   2. a 4th node: all 4 bind;
#   3. a second gang waits whole while the first holds the GPUs, and binds whole once the first is deleted;
#   4. the contrast, default-scheduler, no gang, 3 nodes: 3 bind and 1 waits;
#   5. kwok: bound pods run; a pod of an initializer job completes, a trainer pod keeps running.
# Stops what it started and deletes what it created. Env: KUBECTL (default kubectl), KAI_FN_TESTBED_DIR (logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export KUBECONFIG=${1:?usage: check-gang.sh KUBECONFIG}
kubectl=${KUBECTL:-kubectl}
logs=${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed}
ns=gang-check
pool=gang-check
mkdir -p "$logs"

sched=$("$here/build.sh" | tail -1)
kwokbin=$("$here/../kwok/build.sh" | tail -1)

k() { "$kubectl" "$@"; }
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; k get pods -n "$ns" -o wide >&2 || true; exit 1; }

pids=()
cleanup() {
  k delete namespace "$ns" --wait=false --ignore-not-found >/dev/null 2>&1 || true
  k delete nodes -l "kai-fn.testbed/pool=$pool" --ignore-not-found >/dev/null 2>&1 || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

if ! k get crd podgroups.scheduling.x-k8s.io >/dev/null 2>&1; then
  k apply -f "$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/coscheduling/crd.yaml"
  k wait --for=condition=Established crd/podgroups.scheduling.x-k8s.io --timeout=30s
fi

step "start kube-scheduler, podgroup-controller, kwok (logs in $logs)"
if [ -s "$logs/chain.pids" ]; then  # `cluster up --chain` runs them already
  echo "using the running chain's kube-scheduler, podgroup-controller and kwok"
else
  "$here/start.sh" "$sched" >"$logs/kube-scheduler.log" 2>&1 & pids+=($!)
  "$sched/podgroup-controller" --kubeconfig="$KUBECONFIG" >"$logs/podgroup-controller.log" 2>&1 & pids+=($!)
  "$here/../kwok/start.sh" "$kwokbin/kwok" >"$logs/kwok.log" 2>&1 & pids+=($!)
fi

k create namespace "$ns" >/dev/null

pods() { # pods NAME_PREFIX SCHEDULER [GROUP]
  for i in 0 1 2 3; do
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1-$i
  namespace: $ns
  labels: {${3:+scheduling.x-k8s.io/pod-group: $3}}
spec:
  schedulerName: $2
  terminationGracePeriodSeconds: 0
  nodeSelector: {kai-fn.testbed/pool: $pool}
  containers:
  - name: trainer
    image: testbed/none
    resources: {limits: {nvidia.com/gpu: 8}}
---
EOF
  done
}
bound() { k get pods -n "$ns" -l "$1" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true; }
# Waits until the scheduler has tried every selected pod: bound, or PodScheduled=False.
tried() {
  for _ in $(seq 60); do
    n=$(k get pods -n "$ns" -l "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].status}{"\n"}{end}' | grep -c . || true)
    [ "$n" -ge 4 ] && return 0
    sleep 1
  done
  fail "the scheduler did not try every pod of $1"
}

# Waits until the scheduler has turned every selected pod away (PodScheduled=False, Unschedulable).
rejected() {
  for _ in $(seq 60); do
    n=$(k get pods -n "$ns" -l "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].reason}{"\n"}{end}' | grep -c Unschedulable || true)
    [ "$n" -eq 4 ] && return 0
    sleep 1
  done
  fail "the pods of $1 were not all marked Unschedulable"
}

step "3 nodes x 8 GPUs; PodGroup gang minMember 4 (minResources 32 GPUs, as kai_fn writes); 4 pods x 8 GPUs"
"$kwokbin/simnodes" -prefix "$pool-" 3x8
k apply -f - <<EOF
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: gang, namespace: $ns}
spec: {minMember: 4, minResources: {nvidia.com/gpu: "32"}}
EOF
pods gang scheduler-plugins-scheduler gang | k apply -f - >/dev/null
rejected scheduling.x-k8s.io/pod-group=gang
[ "$(bound scheduling.x-k8s.io/pod-group=gang)" -eq 0 ] || fail "a gang pod bound on 3 nodes"
echo "ok: 0 of 4 bound, all 4 Unschedulable"
k get podgroups.scheduling.x-k8s.io gang -n "$ns" -o jsonpath='PodGroup status: {.status}{"\n"}'

step "add a 4th node"
added=$(date +%s)
"$kwokbin/simnodes" -prefix "$pool-" 4x8
k wait pods -n "$ns" -l scheduling.x-k8s.io/pod-group=gang --for=condition=PodScheduled --timeout=120s >/dev/null ||
  fail "the gang did not bind after the 4th node"
echo "ok: 4 of 4 bound, $(($(date +%s) - added))s after the 4th node"
k get pods -n "$ns" -l scheduling.x-k8s.io/pod-group=gang -o \
  custom-columns=POD:.metadata.name,NODE:.spec.nodeName,SCHEDULED:'.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime'
k wait pods -n "$ns" -l scheduling.x-k8s.io/pod-group=gang --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null ||
  fail "kwok did not run the bound pods"
echo "ok: kwok runs them"
k get podgroups.scheduling.x-k8s.io gang -n "$ns" -o jsonpath='PodGroup status: {.status}{"\n"}'

step "competition: a second gang of 4 x 8 GPUs waits whole, and binds whole once the first is deleted"
k apply -f - >/dev/null <<EOF
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: second, namespace: $ns}
spec: {minMember: 4, minResources: {nvidia.com/gpu: "32"}}
EOF
pods second scheduler-plugins-scheduler second | k apply -f - >/dev/null
rejected scheduling.x-k8s.io/pod-group=second
[ "$(bound scheduling.x-k8s.io/pod-group=second)" -eq 0 ] || fail "part of the second gang bound"
echo "ok: 0 of 4 bound while the first gang holds the GPUs"
deleted=$(date +%s)
k delete pods -n "$ns" -l scheduling.x-k8s.io/pod-group=gang --wait=true >/dev/null
k wait pods -n "$ns" -l scheduling.x-k8s.io/pod-group=second --for=condition=PodScheduled --timeout=120s >/dev/null ||
  fail "the second gang did not bind after the first was deleted"
echo "ok: 4 of 4 bound, $(($(date +%s) - deleted))s after deleting the first gang"

step "contrast: default-scheduler, no gang, 3 nodes"
k delete pods -n "$ns" --all --wait=true >/dev/null
k delete node "$pool-3" >/dev/null
pods plain default-scheduler | sed 's/labels: {}/labels: {run: plain}/' | k apply -f - >/dev/null
tried run=plain
[ "$(bound run=plain)" -eq 3 ] || fail "want 3 of 4 bound without a gang, got $(bound run=plain)"
echo "ok: 3 of 4 bound, one waits"
k get pods -n "$ns" -l run=plain -o custom-columns=POD:.metadata.name,NODE:.spec.nodeName

step "kwok: an initializer pod completes, a trainer pod keeps running"
k delete pods -n "$ns" --all --wait=true >/dev/null
for job in dataset-initializer node; do
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $job
  namespace: $ns
  labels: {jobset.sigs.k8s.io/replicatedjob-name: $job}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {kai-fn.testbed/pool: $pool}
  containers: [{name: main, image: testbed/none}]
EOF
done
k wait pod/dataset-initializer -n "$ns" --for=jsonpath='{.status.phase}'=Succeeded --timeout=60s >/dev/null ||
  fail "the initializer pod did not complete"
k wait pod/node -n "$ns" --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null || fail "the trainer pod does not run"
[ "$(k get pod/node -n "$ns" -o jsonpath='{.status.phase}')" = Running ] || fail "the trainer pod did not stay Running"
echo "ok: dataset-initializer Succeeded, node Running"
echo PASS
