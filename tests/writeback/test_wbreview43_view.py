"""wbreview43, the view's side (no FUSE; a stand-in records the kernel's backing-file ioctls,
as in test_mount_passthrough.py): which opens of a ``--passthrough`` mount are staged and
handed to the kernel, by the open's flags. The real mounts: tests/fuse/test_wbreview43_*.py.
"""

from __future__ import annotations

import os

from fuse_adapter.tree import ROOT_INODE
from tests.writeback.conftest import Env
from tests.writeback.test_mount_passthrough import Kernel, view_of


def test_an_o_sync_create_or_rewrite_is_not_handed_to_the_kernel(env: Env) -> None:
    """The kernel syncs a passthrough handle's writes to its backing file only and sends no
    FSYNC: an ``O_SYNC``/``O_DSYNC`` file must take the daemon path, whose writes the kernel
    follows with an FSYNC."""
    kernel = Kernel()
    view = view_of(env, kernel)
    fh, st, backing, direct = view.create(ROOT_INODE, "log", exclusive=False, sync=True)
    assert (backing, direct) == (0, False) and kernel.open_ids == {}
    assert view.write(fh, 0, b"durable") == 7
    view.fsync(fh)  # what the kernel sends after the write
    view.flush(fh)
    view.release(fh)
    fh, backing, direct = view.open(st.ino, truncate=True, sync=True)  # O_TRUNC|O_DSYNC
    assert (backing, direct) == (0, False) and kernel.open_ids == {}
    view.release(fh)
    fh, _, backing, _ = view.create(ROOT_INODE, "plain", exclusive=False)  # as before
    assert backing and len(kernel.open_ids) == 1
    view.release(fh)


def test_a_staged_file_opened_with_o_noatime_counts_as_mapped(env: Env) -> None:
    """Its backing file has the caller's O_NOATIME, so a mapping through it moves no atime."""
    view = view_of(env)
    fh, _, backing, _ = view.create(ROOT_INODE, "a", exclusive=False)
    assert backing
    staged = view._handles[fh][1]._of
    if staged._staging.atime_seen:  # else every staged file counts as mapped (a noatime disk)
        assert not staged.maybe_mapped(os.fstat(staged.fd))  # nobody mapped or read it
    fh2, _, _, _ = view.create(ROOT_INODE, "b", exclusive=False, noatime=True)
    staged2 = view._handles[fh2][1]._of
    assert staged2.maybe_mapped(os.fstat(staged2.fd))
    fh3, _, _ = view.open(view.lookup(ROOT_INODE, "a").ino, truncate=False, noatime=True)
    assert staged.maybe_mapped(os.fstat(staged.fd))  # a later O_NOATIME handle of the same file
    for h in (fh, fh2, fh3):
        view.release(h)
