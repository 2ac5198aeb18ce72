#!/usr/bin/env bash
# One entry point for a fresh machine: `./run.sh demo` runs the embedded demo, `./run.sh test` the test suite,
# `./run.sh cluster up|down|status` the real control plane of testbed/ (see testbed/cluster.sh; `up --chain` deploys
# kai_fn from .venv).
# Each creates .venv on first use and installs the pinned requirements into it.
set -euo pipefail
cd "$(dirname "$0")"

venv() {
  local stamp=.venv/.requirements.sha
  local want
  want=$(cat requirements-cli.txt requirements.txt requirements-dev.txt constraints.txt | sha256sum | cut -d' ' -f1)
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
    echo "$want" > "$stamp"
  fi
}

case "${1:-}" in
  demo)
    venv
    shift
    exec .venv/bin/python -m kai_fn demo "$@"
    ;;
  test)
    venv
    shift
    # Given only options (no paths, no -k/-m), the tiers run side by side as three pytest processes: the chain tier
    # (tests/chain, on `cluster up --chain`), the testbed tier (tests/testbed, on a plain testbed of its own, in
    # <state>-plain) and the emulator tiers. The real tiers mostly wait for their testbeds. The other two's output
    # follows the chain tier's. Anything else: one pytest.
    for arg in "$@"; do
      case $arg in -k|-m|-k*|-m*|[!-]*) exec .venv/bin/python -m pytest "$@" ;; esac
    done
    plain_log=$(mktemp) quick_log=$(mktemp)
    trap 'rm -f "$plain_log" "$quick_log"' EXIT
    .venv/bin/python -m pytest "$@" -m "not testbed and not chain" > "$quick_log" 2>&1 &
    quick=$!
    KAI_FN_TESTBED_DIR=${KAI_FN_TESTBED_DIR:-$HOME/.cache/kai-fn/testbed}-plain \
      .venv/bin/python -m pytest "$@" -m testbed > "$plain_log" 2>&1 &
    plain=$!
    chain_rc=0; .venv/bin/python -m pytest "$@" -m chain || chain_rc=$?
    plain_rc=0; wait "$plain" || plain_rc=$?
    quick_rc=0; wait "$quick" || quick_rc=$?
    echo "==> the testbed tier (run beside the chain tier):"
    cat "$plain_log"
    echo "==> the emulator tiers (run beside the real ones):"
    cat "$quick_log"
    # Without Go the real tiers are collected and skipped, saying why (tests/conftest.py): exit 0. An exit 5
    # (nothing collected) means they are missing, which fails like any other error.
    [ "$chain_rc" = 0 ] && [ "$plain_rc" = 0 ] && [ "$quick_rc" = 0 ]
    ;;
  check)
    # The static checks .ci/run makes before the tests: ruff over the Python tree, mypy --strict over the whole kai_fn
    # package and main.py (pyproject.toml's [tool.mypy]).
    venv
    .venv/bin/ruff check --quiet kai_fn tests bench main.py
    .venv/bin/mypy
    ;;
  cluster)
    shift
    # The chain deploys kai_fn (python -m kai_fn.local.chain serve) unless told not to.
    if [ "${1:-}" = up ] && [[ " $* " == *" --chain "* && " $* " != *" --without-kai-fn "* ]]; then venv; fi
    exec testbed/cluster.sh "$@"
    ;;
  *)
    echo "usage: ./run.sh demo [--real] | ./run.sh test [pytest args] | ./run.sh check |" \
      "./run.sh cluster up [--chain [--without-kai-fn]]|down|status" >&2
    exit 2
    ;;
esac
