#!/bin/bash
# What keeping pytest's rewritten modules is worth to `make test`'s start-ups (docs/benchmarks.md,
# "Suite time, seventh stop"). Each run is a fresh `git archive` of COMMIT (no __pycache__, as a
# fresh clone) and starts with no rewritten plugin modules in the .venv (pytest rewrites every
# module of a pytest11 plugin's package: schemathesis, hypothesis); it runs make test's two
# passes with --collect-only (the controller, the two workers' collections, then the exclusive
# pass's), "dwb1" with PYTHONDONTWRITEBYTECODE=1 (this machine's environment), "kept" without it
# (what make test does). Prints CPU seconds (pytest and the children it waited for: the workers)
# and wall of each pass, alternating the modes per pair so both see the same load.
#   bench/suite/rewrite_cache.sh COMMIT PAIRS
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
commit=$1 pairs=$2
py="$repo/.venv/bin/python"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
work=$(mktemp -d -t datahub-rewrite-XXXXXX)
measure() {  # label, tree, env..., -- pytest args
  local label=$1 tree=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local start end user sys
  start=$(date +%s.%N)
  (cd "$tree" && env "${envs[@]}" PYTHONPATH="$tree" /usr/bin/time -f "%U %S" -o "$tree.time" \
    "$py" -m pytest -q -p no:cacheprovider --collect-only "$@" >"$tree.$label.log" 2>&1) || true
  end=$(date +%s.%N)
  read -r user sys <"$tree.time"
  echo "  $label: $(echo "$user + $sys" | bc) CPU-s ($user user, $sys sys), $(echo "$end - $start" | bc) s wall; $(grep -E "collected|tests? (ran|run)|error" "$tree.$label.log" | tail -1); load $(cut -d' ' -f1 /proc/loadavg)"
}
for ((i = 1; i <= pairs; i++)); do
  for mode in dwb1 kept; do
    tree="$work/$mode-$i"
    mkdir -p "$tree"
    git -C "$repo" archive "$(git -C "$repo" rev-parse "$commit")" | tar -x -C "$tree"
    find "$site" -name "*-pytest-*.pyc" -delete
    if [ "$mode" = dwb1 ]; then e=(PYTHONDONTWRITEBYTECODE=1); else e=(-u PYTHONDONTWRITEBYTECODE); fi
    echo "$mode pair $i:"
    measure parallel "$tree" "${e[@]}" -- -n 2 --dist loadfile -m "not exclusive" --exclusive-list "$tree/excl.txt"
    measure exclusive "$tree" "${e[@]}" -- "@$tree/excl.txt"
  done
done
rm -rf "$work"
