"""wbreview43, the view's side (no FUSE; a stand-in records the kernel's backing-file ioctls,
as in test_mount_passthrough.py): which opens of a ``--passthrough`` mount are staged and
handed to the kernel, by the open's flags. The real mounts: tests/fuse/test_wbreview43_*.py.
"""

from __future__ import annotations

import os

from fuse_adapter.tree import ROOT_INODE
from tests.writeback.conftest import Env
from tests.writeback.test_mount_passthrough import Kernel, kernel_write, view_of


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


def test_an_o_sync_writer_beside_a_staged_handle_names_its_file_and_writes_through_the_daemon(
    env: Env,
) -> None:
    """wbreview72: the kernel demands the staged file's backing id of every open beside its
    passthrough handles; an ``O_SYNC`` writer gets it with direct I/O, so its WRITEs come here,
    and each is committed before it is answered (the kernel sends no FSYNC after them)."""
    kernel = Kernel()
    view = view_of(env, kernel)
    fh, st, backing, direct = view.create(ROOT_INODE, "log", exclusive=False)
    assert backing and not direct
    kernel_write(view, fh, 0, b"x" * 10)
    sync, sync_backing, sync_direct = view.open(st.ino, truncate=False, sync=True)
    assert (sync_backing, sync_direct) == (backing, True)
    assert not view.writes_in_memory(sync, 0, 4)
    staged = view._handles[fh][1]._of
    assert staged.size == 0  # the kernel's write is in no commit yet
    assert view.write(sync, 0, b"SYNC") == 4
    assert staged.size == 10  # committed before the WRITE was answered, with the kernel's bytes
    assert view.read(fh, 0, 10) == b"SYNCxxxxxx"  # one staged file: the passthrough handle sees it
    reader, reader_backing, reader_direct = view.open(st.ino, truncate=False, writable=False, sync=True)
    assert (reader_backing, reader_direct) == (backing, False)  # a reader has nothing to sync
    for h in (reader, sync, fh):
        view.release(h)
    assert kernel.open_ids == {}
