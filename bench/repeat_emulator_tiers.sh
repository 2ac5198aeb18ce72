#!/usr/bin/env bash
# The emulator tiers N times in a row (default 20), to find tests that wait on timing they do not control: a line per
# run (its exit code, length and pytest's last line) in $LOG (default /tmp/kai-fn-repeat/summary.log), each run's
# output beside it. Not part of CI: a run takes minutes. docs/develop.md records the last count.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
dir=$(dirname "${LOG:=/tmp/kai-fn-repeat/summary.log}")
mkdir -p "$dir"
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  .venv/bin/python -m pytest -m "not testbed and not chain" -q -x -p no:cacheprovider > "$dir/run-$i.log" 2>&1
  rc=$?
  echo "run $i rc $rc $(( $(date +%s) - start ))s $(tail -1 "$dir/run-$i.log")" >> "$LOG"
done
grep -c " rc 0 " "$LOG"
