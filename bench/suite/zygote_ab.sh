#!/bin/bash
# A/B of the test zygote (tests/zygote.py): the same tests, one checkout, DATAHUB_TEST_ZYGOTE=0
# (every test daemon a fresh interpreter: the base) and =1 (forks of the pre-imported zygote),
# alternating which goes first per round, so both see the same machine load.
#   bench/suite/zygote_ab.sh ROUNDS FILE...   e.g. bench/suite/zygote_ab.sh 2 tests/fuse/test_remount.py
# Each run is in a cpuacct cgroup of its own (cgroup v1, root): its CPU seconds count every
# process of the run (pytest, moto, the zygote, every daemon, re-parented ones too), which
# /usr/bin/time cannot (a zygote's children are waited for by the zygote, the zygote only at
# the run's end, or never). Prints per run: wall, tree CPU-s, pytest's summary, the load.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
rounds=$1
shift
root=/sys/fs/cgroup/cpuacct
work=$(mktemp -d -t datahub-zygote-ab-XXXXXX)
for ((i = 1; i <= rounds; i++)); do
  order="0 1"
  ((i % 2 == 0)) && order="1 0"
  for z in $order; do
    cg="$root/zygote-ab-$$-$i-$z"
    mkdir "$cg"
    log="$work/z$z-$i.log"
    start=$(date +%s.%N)
    (echo "$BASHPID" >"$cg/cgroup.procs" && cd "$repo" && DATAHUB_TEST_ZYGOTE=$z PYTHONPATH="$repo" \
      exec nice "$repo/.venv/bin/python" -m pytest -q -p no:randomly -p no:cacheprovider -n 0 \
      -m "not exclusive" "$@" >"$log" 2>&1) || true
    end=$(date +%s.%N)
    for ((w = 0; w < 300; w++)); do  # a left daemon's exit, counted too (at most 60 s)
      [ -s "$cg/cgroup.procs" ] || break
      sleep 0.2
    done
    left=$(wc -l <"$cg/cgroup.procs")
    cpu=$(echo "scale=1; $(cat "$cg/cpuacct.usage") / 1000000000" | bc)
    [ "$left" = 0 ] && rmdir "$cg"
    echo "round $i DATAHUB_TEST_ZYGOTE=$z: $(echo "$end - $start" | bc | cut -d. -f1) s wall, $cpu CPU-s;" \
      "$(grep -E "passed|failed|error|no tests ran" "$log" | tail -1); $left left running; load $(cut -d' ' -f1-3 /proc/loadavg); log $log"
  done
done
