#!/bin/bash
# A/B of test-suite time: the same test files on two commits, alternating base/head per pair,
# so both see the same machine load (the suite's time is a goal: README, docs/benchmarks.md).
#   bench/suite/ab.sh BASE HEAD PAIRS FILE... e.g. bench/suite/ab.sh 5d0c633 HEAD 2 tests/storage
# Each tree is `git archive`d to a temp dir and run with the checkout's .venv, PYTHONPATH set
# to that tree (so its datahub and tests are imported, not the editable install's). Prints the
# wall time and CPU seconds (user + system of pytest and every child it waited for: mount
# daemons, moto, CLI runs; /usr/bin/time) of each run, and the load average at its end; the
# per-test durations are in the logs it names (sum them per file). On the shared machine the
# CPU seconds are the figure to compare; the wall of a loaded run is noise.
# DATAHUB_TEST_CEPH_ENV is passed through (reuse a running dev Ceph).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 head=$2 pairs=$3
shift 3
work=$(mktemp -d -t datahub-suite-ab-XXXXXX)
for t in base head; do
  mkdir -p "$work/$t"
  git -C "$repo" archive "$(git -C "$repo" rev-parse "${!t}")" | tar -x -C "$work/$t"
  ln -s "$repo/.venv" "$work/$t/.venv"  # what tests find beside their tree (axe-core for tests/browser)
done
for ((i = 1; i <= pairs; i++)); do
  for t in base head; do
    log="$work/$t-$i.log"
    (cd "$work/$t" && PYTHONPATH="$work/$t" /usr/bin/time -o "$log.time" -f "%e %U %S" \
      "$repo/.venv/bin/python" -m pytest -q -p no:cacheprovider -n 0 --durations=0 "$@" >"$log" 2>&1) || true
    read -r wall user sys < <(tail -1 "$log.time")
    echo "$t (${!t}) pair $i: $wall s wall, $(echo "$user + $sys" | bc) CPU-s; $(grep -E "passed|failed|error|no tests ran" "$log" | tail -1); load $(cut -d' ' -f1-3 /proc/loadavg); log $log"
  done
done
