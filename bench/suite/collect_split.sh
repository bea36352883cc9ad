#!/bin/bash
# What the second worker's reverse-order import saves a fresh checkout's parallel collection
# (tests/conftest.py, pytest_collection; docs/benchmarks.md, "Suite time, eighth stop"). Each
# run is a fresh `git archive` of its commit (no __pycache__: a fresh clone) collecting the
# whole suite as make test's parallel pass does (-n 2; -k selecting nothing: xdist ignores -n
# with --collect-only), with the timeline
# plugin: prints each worker's collection (wall from the controller's start, CPU-s) and the
# CPU-s of the whole (pytest and the workers it waited for), base and head taking turns.
#   bench/suite/collect_split.sh BASE HEAD PAIRS
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 head=$2 pairs=$3
py="$repo/.venv/bin/python"
work=$(mktemp -d -t datahub-collect-XXXXXX)
for ((i = 1; i <= pairs; i++)); do
  for t in base head; do
    tree="$work/$t-$i"
    mkdir -p "$tree"
    git -C "$repo" archive "$(git -C "$repo" rev-parse "${!t}")" | tar -x -C "$tree"
    (cd "$tree" && env -u PYTHONDONTWRITEBYTECODE DATAHUB_SUITE_TIMELINE="$tree.jsonl" PYTHONPATH="$tree" \
      /usr/bin/time -f "%U %S %e" -o "$tree.time" "$py" -m pytest -q -p no:cacheprovider -p bench.suite.timeline \
      -n 2 --dist loadfile -m "not exclusive" -k no_test_has_this_name >"$tree.log" 2>&1) || true
    read -r user sys wall < <(tail -1 "$tree.time")  # after "Command exited with non-zero status 5"
    echo "$t (${!t}) pair $i: $(echo "$user + $sys" | bc) CPU-s, ${wall} s wall; load $(cut -d' ' -f1 /proc/loadavg); $(grep -E "deselected|no tests ran|error" "$tree.log" | tail -1)"
    "$py" - "$tree.jsonl" <<'PY'
import json, sys
evs = [json.loads(line) for line in open(sys.argv[1])]
zero = min(e["t"] for e in evs if e["ev"] == "start")
for e in sorted((e for e in evs if e["ev"] == "collected"), key=lambda e: e["w"]):
    print(f"  {e['w']}: {e['n']} items collected at {e['t'] - zero:.1f} s, {e['cpu']:.1f} CPU-s")
PY
  done
done
rm -rf "$work"
