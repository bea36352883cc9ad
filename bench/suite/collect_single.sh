#!/bin/bash
# A single process's collection of the whole suite (pytest --collect-only, no xdist), base and
# head taking turns, each a fresh `git archive` of its commit (no __pycache__: a fresh clone).
# Prints CPU-s (user + sys), wall and the load. The parallel
# pass's per-worker figures: bench/suite/collect_split.sh (collect21, docs/benchmarks.md).
#   bench/suite/collect_single.sh BASE HEAD PAIRS
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 head=$2 pairs=$3
py="$repo/.venv/bin/python"
work=$(mktemp -d -t datahub-collect1-XXXXXX)
for ((i = 1; i <= pairs; i++)); do
  for t in base head; do
    tree="$work/$t-$i"
    mkdir -p "$tree"
    git -C "$repo" archive "$(git -C "$repo" rev-parse "${!t}")" | tar -x -C "$tree"
    (cd "$tree" && env -u PYTHONDONTWRITEBYTECODE PYTHONPATH="$tree" \
      /usr/bin/time -f "%U %S %e" -o "$tree.time" "$py" -m pytest -q -p no:cacheprovider \
      --collect-only tests >"$tree.log" 2>&1) || true
    read -r user sys wall < <(tail -1 "$tree.time")
    echo "$t (${!t}) pair $i: $(echo "$user + $sys" | bc) CPU-s, ${wall} s wall; load $(cut -d' ' -f1 /proc/loadavg); $(grep -E "collected|error" "$tree.log" | tail -1)"
  done
done
rm -rf "$work"
