#!/bin/sh
# A/B of a small file's daemon cost: profile_small.py from an older tree and from this one,
# taking turns in one run (the machine is shared: daemon CPU and syscalls per file are the
# figures to compare, wall-clock ratios swing with the load).
#   bench/writeback/ab_small.sh OLD_TREE [ROUNDS] [FILES] [SIZE]
# SIZE: bytes per file (default 100000; 16777216 for the daemon CPU per MiB of 16 MiB files)
# OLD_TREE: an export of the older commit, e.g.
#   mkdir /tmp/old && git archive <commit> | tar -x -C /tmp/old
# Both run with this worktree's .venv (same pyfuse3 build); `python -m fuse_adapter` in
# each tree's directory imports that tree's code.
set -eu
old=$(cd "$1" && pwd); rounds=${2:-2}; files=${3:-300}; size=${4:-100000}
new=$(cd "$(dirname "$0")/../.." && pwd); py="$new/.venv/bin/python"
for r in $(seq "$rounds"); do
  for mode in --no-passthrough --passthrough; do
    for threads in 1 4; do
      for tree in "$old" "$new"; do
        echo "== round $r, $([ "$tree" = "$new" ] && echo new || echo old), $mode, $threads writer(s)"
        (cd "$tree" && "$py" bench/writeback/profile_small.py --files "$files" --size "$size" --threads "$threads" "$mode") \
          | grep -E 'load|ms/file|futex|prctl|epoll_wait|fdatasync|recvfrom|sendto'
      done
    done
  done
done
