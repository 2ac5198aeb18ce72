#!/usr/bin/env bash
# The emulator tiers N times in a row (default 20), to find tests that wait on timing they do not control: a line per
# run (the commit, its exit code, length and pytest's last line) in $LOG (default /tmp/kai-fn-repeat/summary.log),
# each run's output beside it. Not part of CI: a run takes minutes. Prints the count docs/develop.md records: the
# runs that passed one after the other since the last failure, at this commit.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
dir=$(dirname "${LOG:=/tmp/kai-fn-repeat/summary.log}")
mkdir -p "$dir"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain 2>/dev/null)" ] || commit="$commit+changes"
echo "# $(date -u +%FT%TZ) $runs runs at $commit on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
streak=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  .venv/bin/python -m pytest -m "not testbed and not chain" -q -x -p no:cacheprovider > "$dir/run-$i.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then streak=$((streak + 1)); else streak=0; fi
  echo "run $i at $commit rc $rc $(( $(date +%s) - start ))s $(tail -1 "$dir/run-$i.log")" >> "$LOG"
done
echo "$streak consecutive passing runs (of $runs) at $commit" | tee -a "$LOG"
