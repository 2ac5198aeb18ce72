#!/usr/bin/env bash
# Build testbed binaries from the Go modules under testbed/, cached outside the work tree:
#   ${KAI_FN_CACHE:-$HOME/.cache/kai-fn}/bin/<component>-<key>/<component>
# <key> is the pinned upstream version plus a hash of the module's go.mod/go.sum (and, for our own programs,
# its sources) and the Go version, so a warm run builds nothing. Progress goes to stderr; stdout gets one
# "<component>=<path>" line per component, for scripts.
#
#   testbed/build.sh                    # etcd kube-apiserver kube-controller-manager kubectl launcher
#   testbed/build.sh kubectl oracle     # any of: etcd kube-apiserver kube-controller-manager kube-scheduler
#                                       #   kubectl launcher, or <dir> for a main package in testbed/<dir>
#   testbed/build.sh scheduler kwok kai # several binaries each, one directory: "<component>=<dir>"
#     scheduler: kube-scheduler (+ scheduler-plugins Coscheduling) and podgroup-controller (testbed/scheduler)
#     kwok:      kwok (sigs.k8s.io/kwok/cmd/kwok) and simnodes (testbed/kwok)
#     eventing:  Knative's apiserver_receive_adapter (ApiServerSource) and mtping (PingSource), knative.dev/eventing
#                (testbed/eventing: upstream's mains without the :8080 probe server)
#     serving:   Knative Serving's queue-proxy, knative.dev/serving/cmd/queue as <dir>/queue (testbed/serving: upstream's
#                main, built vendored with testbed/serving/queue-ports.patch applied: its fixed admin and metrics
#                ports :8022 and :9090 from QUEUE_ADMIN_PORT and QUEUE_METRICS_PORT)
#     kai:       KAI Scheduler's scheduler, binder, podgroupcontroller, queuecontroller, podgrouper, with its CRDs in
#                <dir>/crds, its default queues and PriorityClasses in <dir>/*.yaml (testbed/kai)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KAI_FN_CACHE:-$HOME/.cache/kai-fn}
bin_root=$cache/bin
nice_level=${KAI_FN_BUILD_NICE:-10}
KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
KAI_MODULE=github.com/kai-scheduler/KAI-scheduler

default_components=(etcd kube-apiserver kube-controller-manager kubectl launcher)
components=("$@")
[ ${#components[@]} -gt 0 ] || components=("${default_components[@]}")

command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }
mkdir -p "$bin_root"
log() { echo "build.sh: $*" >&2; }

exec 9>"$bin_root/.build.lock"
flock -n 9 || { log "waiting for another build.sh to finish"; flock 9; }

# module_of <component> -> "<module dir> <package[,package]> <version label> <hash sources?>"
# Several packages: one binary each, named after the package's last element, in one directory.
module_of() {
  case $1 in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl)
      echo "$here/kube k8s.io/kubernetes/cmd/$1 $KUBE_VERSION no" ;;
    etcd) echo "$here/etcd . $ETCD_VERSION no" ;;
    scheduler)
      local sp
      sp=$(awk '$1 == "sigs.k8s.io/scheduler-plugins" {print $2}' "$here/scheduler/go.mod")
      echo "$here/scheduler ./cmd/kube-scheduler,./cmd/podgroup-controller $KUBE_VERSION-$sp yes" ;;
    kwok)
      local kw
      kw=$(awk '$1 == "sigs.k8s.io/kwok" {print $2}' "$here/kwok/go.mod")
      echo "$here/kwok sigs.k8s.io/kwok/cmd/kwok,./cmd/simnodes $kw yes" ;;
    eventing)
      local ev
      ev=$(awk '$1 == "knative.dev/eventing" {print $2}' "$here/eventing/go.mod")
      echo "$here/eventing ./cmd/apiserver_receive_adapter,./cmd/mtping $ev yes" ;;
    serving)
      local sv
      sv=$(awk '$1 == "knative.dev/serving" {print $2} $1 == "require" && $2 == "knative.dev/serving" {print $3}' \
        "$here/serving/go.mod")
      echo "$here/serving knative.dev/serving/cmd/queue $sv no" ;;
    kai)
      local kv p pkgs=""
      kv=$(awk -v m="$KAI_MODULE" '$1 == m {print $2} $1 == "require" && $2 == m {print $3}' "$here/kai/go.mod")
      for p in scheduler binder podgroupcontroller queuecontroller podgrouper; do
        pkgs+=${pkgs:+,}$KAI_MODULE/cmd/$p
      done
      echo "$here/kai $pkgs $kv no" ;;
    launcher)
      local js tr
      js=$(awk '$1 == "sigs.k8s.io/jobset" {print $2}' "$here/launcher/go.mod")
      tr=$(awk '$1 == "github.com/kubeflow/trainer/v2" {print $2}' "$here/launcher/go.mod")
      echo "$here/launcher . jobset-$js-trainer-$tr yes" ;;
    *)
      [ -f "$here/$1/go.mod" ] || { log "unknown component '$1' (no testbed/$1/go.mod)"; exit 2; }
      echo "$here/$1 . local yes" ;;
  esac
}

key_of() {
  local dir=$1 version=$2 sources=$3 extra=${4:-}
  {
    go env GOVERSION
    [ -z "$extra" ] || echo "$extra"
    cat "$dir/go.mod" "$dir/go.sum"
    if [ "$sources" = yes ]; then
      (cd "$dir" && find . -name '*.go' -not -path './vendor/*' | LC_ALL=C sort | xargs cat)
    fi
  } | sha256sum | cut -c1-12 | sed "s/^/$version-/"
}

ldflags_of() {
  local flags="-s -w"
  case $1 in
    kube-*|kubectl|scheduler)
      local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitTreeState=clean"
      done ;;
    # KAI's podgroupcontroller ignores its --metrics-bind-address and serves metrics on controller-runtime's
    # default :8080; "0" as that default turns it off (the other components pass their flag, so it is unused).
    kai) flags+=" -X sigs.k8s.io/controller-runtime/pkg/metrics/server.DefaultBindAddress=0" ;;
  esac
  echo "$flags"
}

# KAI's module is served only by the file-based proxy in ../shared/goproxy (its README): that proxy first, then
# the usual one, and no checksum database for that one module; go.sum pins its hash. Only for the kai build.
kai_env() {
  local dir=${KAI_FN_GOPROXY_DIR:-$here/../../shared/goproxy}
  [ -d "$dir" ] || { log "kai: no Go module proxy at $dir (it serves $KAI_MODULE; set KAI_FN_GOPROXY_DIR)"; exit 1; }
  echo "GOPROXY=file://$(cd "$dir" && pwd),$(go env GOPROXY) GONOSUMDB=$KAI_MODULE"
}

# Next to the binaries, what KAI's install puts in a cluster besides them, from the module: its CRDs, its default
# queues (docs/quickstart) and its default PriorityClasses (the Helm chart's templates, enabled by default, whose
# only template lines are the `{{- if }}` around each).
copy_kai_manifests() {
  local dir=$1 out=$2 src f
  shift 2
  src=$(cd "$dir" && env "$@" go list -m -f '{{.Dir}}' "$KAI_MODULE")
  mkdir -p "$out/crds"
  cp "$src"/deployments/kai-scheduler/crds/*.yaml "$out/crds/"
  cp "$src/docs/quickstart/default-queues.yaml" "$out/"
  for f in "$src"/deployments/kai-scheduler/templates/priorityclasses/*.yaml; do
    echo ---
    grep -v '^{{' "$f"
  done >"$out/priorityclasses.yaml"
  chmod -R u+w "$out/crds" "$out/default-queues.yaml"
}

# Trainer's and JobSet's webhook kustomizations come from their module zips, next to the launcher binary.
copy_launcher_manifests() {
  local dir=$1 out=$2 js tr
  js=$(cd "$dir" && go mod download sigs.k8s.io/jobset && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
  tr=$(cd "$dir" && go mod download github.com/kubeflow/trainer/v2 && go list -m -f '{{.Dir}}' github.com/kubeflow/trainer/v2)
  mkdir -p "$out/manifests/jobset" "$out/manifests/trainer"
  cp -r "$js/config/components/webhook/." "$out/manifests/jobset/"
  cp -r "$tr/manifests/base/webhook/." "$out/manifests/trainer/"
  chmod -R u+w "$out/manifests"
}

# mtping's ClusterRole (Knative's config/core/roles), from the module zip, next to the eventing binaries.
copy_eventing_manifests() {
  local dir=$1 out=$2 ev
  ev=$(cd "$dir" && go mod download knative.dev/eventing && go list -m -f '{{.Dir}}' knative.dev/eventing)
  mkdir -p "$out/manifests"
  cp "$ev/config/core/roles/pingsource-mt-adapter-clusterrole.yaml" "$out/manifests/"
  chmod -R u+w "$out/manifests"
}

# queue-proxy's two fixed ports made settable (testbed/serving/queue-ports.patch): the module is vendored into a
# scratch copy of testbed/serving and the patch applied to the vendored knative.dev/serving (`go build -overlay`
# refuses files of the module cache), then built with -mod=vendor. Everything else is as the proxy served it.
serving_src() {
  local dir=$1 src=$2
  mkdir -p "$src"
  cp "$dir/go.mod" "$dir/go.sum" "$src/"
  (cd "$src" && go mod vendor) >&2 || { log "serving: go mod vendor failed"; exit 1; }
  patch -s -p1 -d "$src/vendor/knative.dev/serving" <"$dir/queue-ports.patch" >&2 \
    || { log "serving: testbed/serving/queue-ports.patch does not apply"; exit 1; }
}

build_one() {
  local c=$1 dir pkg version sources key out
  read -r dir pkg version sources <<<"$(module_of "$c")"
  local extra=""
  [ "$c" = kai ] && extra=$(ldflags_of kai)
  [ "$c" = serving ] && extra=$(cat "$dir/queue-ports.patch")
  key=$(key_of "$dir" "$version" "$sources" "$extra")
  out=$bin_root/$c-$key
  local pkgs=() bins=() p built=true result=$out/$c
  IFS=, read -r -a pkgs <<<"$pkg"
  if [ ${#pkgs[@]} -gt 1 ] || [ "$c" = serving ]; then
    result=$out
    for p in "${pkgs[@]}"; do bins+=("${p##*/}"); done
  else
    bins=("$c")
  fi
  for p in "${bins[@]}"; do [ -x "$out/$p" ] || built=false; done
  [ "$c" = eventing ] && [ ! -d "$out/manifests" ] && built=false
  [ "$c" != kai ] || [ -f "$out/priorityclasses.yaml" ] || built=false
  if $built; then
    log "$c: up to date (nothing built)"
    echo "$c=$result"
    return
  fi
  local tmp start pid n next goenv=() envs
  if [ "$c" = kai ]; then
    envs=$(kai_env) || exit 1
    read -r -a goenv <<<"$envs"
  fi
  tmp=$(mktemp -d "$bin_root/.$c.XXXXXX")
  start=$SECONDS
  log "$c: building $version from testbed/${dir#"$here"/} (cold builds take minutes; log: $tmp/build.log)"
  local target=$tmp/$c src=$dir mod=readonly
  [ "$result" = "$out" ] && target=$tmp/
  if [ "$c" = serving ]; then
    src=$tmp/.src mod=vendor
    serving_src "$dir" "$src"
  fi
  (cd "$src" && env "${goenv[@]}" CGO_ENABLED=0 nice -n "$nice_level" go build -mod=$mod -trimpath -v \
      -ldflags "$(ldflags_of "$c")" -o "$target" "${pkgs[@]}") >"$tmp/build.log" 2>&1 &
  pid=$!
  next=$((start + 30))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( SECONDS >= next )); then
      next=$((next + 30))
      n=$(grep -c . "$tmp/build.log" || true)
      log "$c: building, $((SECONDS - start))s elapsed, $n packages compiled"
    fi
  done
  if ! wait "$pid"; then
    log "$c: build FAILED after $((SECONDS - start))s; last lines of $tmp/build.log:"
    tail -n 20 "$tmp/build.log" >&2
    exit 1
  fi
  [ "$c" = launcher ] && copy_launcher_manifests "$dir" "$tmp"
  [ "$c" = eventing ] && copy_eventing_manifests "$dir" "$tmp"
  [ "$c" = kai ] && copy_kai_manifests "$dir" "$tmp" "${goenv[@]}"
  rm -rf "$tmp/build.log" "$tmp/.src"
  rm -rf "$out"
  mv "$tmp" "$out"
  log "$c: built in $((SECONDS - start))s"
  echo "$c=$result"
}

total=$SECONDS
for c in "${components[@]}"; do build_one "$c"; done
log "done in $((SECONDS - total))s"
