#!/usr/bin/env bash
# Staged initializers through the real controllers, by hand: ./check-staged.sh KUBECONFIG  (testbed up with --chain)
# Trainer -> JobSet -> Jobs -> pods -> this kube-scheduler (Coscheduling) -> kwok, on 4 nodes x 8 GPUs, with a
# TrainingRuntime whose trainer job dependsOn a dataset initializer. The PodGroup is written by hand, as kai_fn would.
#   gang of the trainer pods only (minMember 4): the initializer runs and completes (default-scheduler), then the
#     4 trainer pods bind as one gang and run.
#   one flat gang over every replicatedJob (minMember 5, what kai_fn's scheduler-plugins flavor planned before it
#     ganged the trainer stage only): the initializer is turned away (1 pod of 5), so the trainer job is never
#     created; the check shows it happens.
# Stops what it started and deletes what it created. Env: KUBECTL (default kubectl), KAI_FN_TESTBED_DIR (logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export KUBECONFIG=${1:?usage: check-staged.sh KUBECONFIG}
kubectl=${KUBECTL:-kubectl}
logs=${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed}
pool=staged-check
mkdir -p "$logs"

sched=$("$here/build.sh" | tail -1)
kwokbin=$("$here/../kwok/build.sh" | tail -1)

k() { "$kubectl" "$@"; }
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; k get pods -A -o wide >&2 || true; exit 1; }

pids=()
cleanup() {
  k delete namespace staged-trainer staged-flat --wait=false --ignore-not-found >/dev/null 2>&1 || true
  k delete nodes -l "kai-fn.testbed/pool=$pool" --ignore-not-found >/dev/null 2>&1 || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

k get crd trainjobs.trainer.kubeflow.org >/dev/null || fail "no Trainer CRDs: start the testbed with --chain"

step "start kube-scheduler, podgroup-controller, kwok (logs in $logs); 4 nodes x 8 GPUs"
if [ -s "$logs/chain.pids" ]; then  # `cluster up --chain` runs them already
  echo "using the running chain's kube-scheduler, podgroup-controller and kwok"
else
  "$here/start.sh" "$sched" >"$logs/kube-scheduler.log" 2>&1 & pids+=($!)
  "$sched/podgroup-controller" --kubeconfig="$KUBECONFIG" >"$logs/podgroup-controller.log" 2>&1 & pids+=($!)
  "$here/../kwok/start.sh" "$kwokbin/kwok" >"$logs/kwok.log" 2>&1 & pids+=($!)
fi
"$kwokbin/simnodes" -prefix "$pool-" 4x8 >/dev/null

# trainjob NAMESPACE MIN_MEMBER INITIALIZER_SCHEDULER INITIALIZER_LABELS
trainjob() {
  k create namespace "$1" >/dev/null
  k apply -f - >/dev/null <<EOF
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: staged, namespace: $1}
spec:
  mlPolicy: {numNodes: 4, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: dataset-initializer
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
          spec:
            template:
              metadata: {labels: $4}
              spec:
                schedulerName: $3
                nodeSelector: {kai-fn.testbed/pool: $pool}
                containers: [{name: dataset-initializer, image: testbed/none}]
      - name: node
        dependsOn: [{name: dataset-initializer, status: Complete}]
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              metadata: {labels: {scheduling.x-k8s.io/pod-group: tj}}
              spec:
                schedulerName: scheduler-plugins-scheduler
                nodeSelector: {kai-fn.testbed/pool: $pool}
                containers: [{name: node, image: testbed/none, resources: {limits: {nvidia.com/gpu: 8}}}]
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: tj, namespace: $1}
spec: {minMember: $2, minResources: {nvidia.com/gpu: "32"}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj, namespace: $1}
spec:
  runtimeRef: {name: staged, kind: TrainingRuntime, apiGroup: trainer.kubeflow.org}
EOF
}
# waits until a pod matching $2 exists in namespace $1
exists() {
  for _ in $(seq 60); do
    [ -n "$(k get pods -n "$1" -l "$2" -o name)" ] && return 0
    sleep 1
  done
  fail "no pod $2 in $1"
}
init=jobset.sigs.k8s.io/replicatedjob-name=dataset-initializer
node=jobset.sigs.k8s.io/replicatedjob-name=node

step "gang of the trainer pods only: the initializer completes, then 4 trainer pods bind as one gang"
trainjob staged-trainer 4 default-scheduler '{}'
exists staged-trainer "$init"
k wait pods -n staged-trainer -l "$init" --for=jsonpath='{.status.phase}'=Succeeded --timeout=60s >/dev/null ||
  fail "the initializer did not complete"
echo "ok: initializer Succeeded"
exists staged-trainer "$node"
k wait pods -n staged-trainer -l "$node" --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null ||
  fail "the trainer pods did not all run"
[ "$(k get pods -n staged-trainer -l "$node" -o name | grep -c .)" -eq 4 ] || fail "want 4 trainer pods"
k get pods -n staged-trainer -o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,SCHEDULED:'.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime'
echo "ok: 4 trainer pods bound and Running"
k delete namespace staged-trainer --wait=true >/dev/null

step "one flat gang over every replicatedJob (minMember 5): the initializer is turned away, the trainer job never starts"
trainjob staged-flat 5 scheduler-plugins-scheduler '{scheduling.x-k8s.io/pod-group: tj}'
exists staged-flat "$init"
k wait pods -n staged-flat -l "$init" --for=jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}'=Unschedulable \
  --timeout=60s >/dev/null || fail "the initializer was not turned away"
[ -z "$(k get pods -n staged-flat -l "$node" -o name)" ] || fail "trainer pods exist: the initializer ran after all"
k get pods -n staged-flat -o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase
echo "ok: deadlock, why kai_fn gangs only the trainer stage of a dependsOn runtime in the scheduler-plugins flavor"
echo PASS
