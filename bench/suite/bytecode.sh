#!/bin/bash
# What bytecode caching is worth to the suite on a fresh clone (docs/benchmarks.md, "Suite time,
# round 5"). Each run is a fresh `git archive` of COMMIT (no __pycache__, as a fresh clone),
# run with the checkout's .venv; "dwb1" runs with PYTHONDONTWRITEBYTECODE=1 (as this machine's
# environment has it: nothing is cached, pytest re-rewrites every test module in every
# process), "cached" runs without it. Prints CPU seconds (the pytest process and the children
# it waited for) and wall, alternating the two per pair so both see the same load.
#   bench/suite/bytecode.sh COMMIT PAIRS PYTEST-ARGS...
#   e.g. bench/suite/bytecode.sh HEAD 2 tests/cli/test_cli.py     (subprocess-heavy tests)
#        bench/suite/bytecode.sh HEAD 1 --collect-only            (one worker's collection)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
commit=$1 pairs=$2
shift 2
work=$(mktemp -d -t datahub-bytecode-XXXXXX)
for ((i = 1; i <= pairs; i++)); do
  for mode in dwb1 cached; do
    tree="$work/$mode-$i"
    mkdir -p "$tree"
    git -C "$repo" archive "$(git -C "$repo" rev-parse "$commit")" | tar -x -C "$tree"
    if [ "$mode" = dwb1 ]; then set_env=(env PYTHONDONTWRITEBYTECODE=1); else set_env=(env -u PYTHONDONTWRITEBYTECODE); fi
    start=$(date +%s.%N)
    (cd "$tree" && "${set_env[@]}" PYTHONPATH="$tree" /usr/bin/time -f "%U %S" -o "$tree.time" \
      "$repo/.venv/bin/python" -m pytest -q -p no:cacheprovider "$@" >"$tree.log" 2>&1) || true
    end=$(date +%s.%N)
    read -r user sys <"$tree.time"
    echo "$mode pair $i: $(echo "$user + $sys" | bc) CPU-s ($user user, $sys sys), $(echo "$end - $start" | bc) s wall; $(tail -1 "$tree.log"); load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
rm -rf "$work"
