"""``python -m tests.writeback.small_reserve_mount ARGS``: the real mount daemon (``python -m
fuse_adapter ARGS``, the same ``main``) with a staged file's first reservation lowered from
64 MiB (``datahub.writeback.staged.STAGE_RESERVE``) to ``RESERVE``.

Why: a test of a writer streaming far past its first reservation through a real mount
wrote 160 MiB for 2.5 times the 64 MiB, and the recovery after its kill -9 flushed all of
it to the object store (40 s of its 55 s, most of the S3 server's CPU, at load 25). At
4 MiB the same code paths run (the watcher reserving ahead of the writer, the close's
commit, the recovery) on 10 MiB, as tests/writeback/test_staged.py lowers it in-process.
"""

from __future__ import annotations

from datahub.writeback import staged
from fuse_adapter.__main__ import exit_now, main

RESERVE = 4 * 1024**2

if __name__ == "__main__":
    staged.STAGE_RESERVE = RESERVE
    exit_now(main())
