#!/bin/bash
# A/B of test-suite time: the same test files on two commits, alternating base/head per pair,
# so both see the same machine load (the suite's time is a goal: README, docs/benchmarks.md).
#   bench/suite/ab.sh BASE HEAD PAIRS FILE... e.g. bench/suite/ab.sh 5d0c633 HEAD 2 tests/storage
# Each tree is `git archive`d to a temp dir and run with the checkout's .venv, PYTHONPATH set
# to that tree (so its datahub and tests are imported, not the editable install's). Prints the
# wall time of each run; the per-test durations are in the logs it names (sum them per file).
# DATAHUB_TEST_CEPH_ENV is passed through (reuse a running dev Ceph).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 head=$2 pairs=$3
shift 3
work=$(mktemp -d -t datahub-suite-ab-XXXXXX)
for t in base head; do
  mkdir -p "$work/$t"
  git -C "$repo" archive "$(git -C "$repo" rev-parse "${!t}")" | tar -x -C "$work/$t"
done
for ((i = 1; i <= pairs; i++)); do
  for t in base head; do
    log="$work/$t-$i.log"
    start=$(date +%s.%N)
    (cd "$work/$t" && PYTHONPATH="$work/$t" "$repo/.venv/bin/python" -m pytest -q -p no:cacheprovider \
      --durations=0 "$@" >"$log" 2>&1) || true
    end=$(date +%s.%N)
    echo "$t (${!t}) pair $i: $(echo "$end - $start" | bc) s wall; $(grep -E "passed|failed|error|no tests ran" "$log" | tail -1); load $(cut -d' ' -f1 /proc/loadavg); log $log"
  done
done
