"""``python -m tests.fuse.no_sweep_mount ARGS``: the real mount daemon (``python -m
fuse_adapter ARGS``, the same ``main``) whose once-a-second sweep of the C tables' published
page files (``fuse_adapter.fuse_ops.SWEEP_SLOTS``) looks at no slot.

Why: tests/fuse/test_review42_shared_page_file.py checks that the tier's word on an eviction
retracts a page file for every inode it backs. The sweep would let go of the others too, a
table's slice a tick (up to ~16 s at 512 slots), and hide whether the eviction did; without it
only the eviction can, so the test checks what happened rather than how soon.
"""

from __future__ import annotations

import sys

from fuse_adapter import fuse_ops
from fuse_adapter.__main__ import exit_now, main

if __name__ == "__main__":
    fuse_ops.SWEEP_SLOTS = 0
    print("no_sweep_mount: the sweep looks at no slot", file=sys.stderr, flush=True)
    exit_now(main())
