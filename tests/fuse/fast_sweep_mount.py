"""``python -m tests.fuse.fast_sweep_mount ARGS``: the real mount daemon (``python -m
fuse_adapter ARGS``, the same ``main``) whose once-a-second sweep of the C tables' published
page files (``fuse_adapter.fuse_ops.SWEEP_SLOTS``) looks at ``SLOTS`` slots a tick instead
of 512: a whole table (8,192 slots) in 4 ticks instead of 16.

Why: tests/fuse/test_evicted_elsewhere.py waits for the sweep to find 12 removed page files
spread over a table by their inodes' hash; at 512 slots a tick that was ~15 s per test of
waiting, the longest part of the file. At 2,048 the same code runs (the cursor still goes
round the table a slice a tick, the same fstat and retraction), in a quarter of the ticks.
"""

from __future__ import annotations

import sys

from fuse_adapter import fuse_ops
from fuse_adapter.__main__ import exit_now, main

SLOTS = 2048

if __name__ == "__main__":
    fuse_ops.SWEEP_SLOTS = SLOTS
    print(f"fast_sweep_mount: the sweep looks at {SLOTS} slots a tick", file=sys.stderr, flush=True)
    exit_now(main())
