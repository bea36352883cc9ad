#!/bin/bash
# Who pays for deleting the previous run's temp tree (docs/benchmarks.md, "Suite time, seventh
# stop"). In a private temp root (PYTEST_DEBUG_TEMPROOT), a fake previous `make test` is laid
# out: its parallel pass's tree (FILES files of 25 KB, written to disk) and its exclusive pass's
# (empty); then the two passes run as make test runs them, on short test files, and the wall
# time of each pass is printed. Run for TREE (a checkout, e.g. a `git archive` of the base) and
# for this checkout, alternating, with this checkout's .venv.
#   bench/suite/old_trees.sh BASE-TREE PAIRS FILES [PARALLEL-PASS-TEST-PATHS...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 pairs=$2 files=$3
shift 3
parallel_tests=("${@:-tests/test_parallel_order.py tests/test_repository.py}")
read -r -a parallel_tests <<<"${parallel_tests[*]}"
py="$repo/.venv/bin/python"
root=$(mktemp -d -t datahub-old-trees-XXXXXX)
user=$("$py" -c 'import getpass; print(getpass.getuser())')
for ((i = 1; i <= pairs; i++)); do
  for t in base head; do
    if [ $t = base ]; then tree=$base; else tree=$repo; fi
    rm -rf "$root/pytest-of-$user"
    mkdir -p "$root/pytest-of-$user/pytest-10" "$root/pytest-of-$user/pytest-11"
    "$py" -c "
import os, sys
d = sys.argv[1]
for i in range(int(sys.argv[2])):
    if i % 100 == 0:
        os.makedirs(f'{d}/t{i // 100}')
    with open(f'{d}/t{i // 100}/f{i}', 'wb') as f:
        f.write(os.urandom(25600))
" "$root/pytest-of-$user/pytest-10" "$files"
    sync
    for pass in parallel exclusive; do
      if [ $pass = parallel ]; then args=(-n 2 --dist loadfile "${parallel_tests[@]}")
      else args=(tests/test_config.py); fi
      start=$(date +%s.%N)
      (cd "$tree" && env -u PYTHONDONTWRITEBYTECODE PYTEST_DEBUG_TEMPROOT="$root" PYTHONPATH="$tree" \
        "$py" -m pytest -q -p no:cacheprovider "${args[@]}" >"$root/$t-$i-$pass.log" 2>&1) || true
      end=$(date +%s.%N)
      echo "$t pair $i $pass: $(echo "$end - $start" | bc) s wall; $(tail -1 "$root/$t-$i-$pass.log"); left: $(ls "$root/pytest-of-$user" | tr '\n' ' '); load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
rm -rf "$root"
