"""wbreview43: a ``write(2)`` through an ``O_SYNC`` or ``O_DSYNC`` descriptor returns once its
bytes are durable, as on a local file system; on a workspace mount, durable means committed to
the shared tier and journaled (docs/writeback.md, "O_SYNC and O_DSYNC").

Through the daemon the kernel follows each such write with an FSYNC, which commits it. With
``--passthrough`` a file created (or rewritten with ``O_TRUNC``) was staged and handed to the
kernel as a passthrough handle: the kernel wrote the backing file and synced it to the node's
disk, and the daemon heard of none of it, so after a kill -9 of the daemon every such
acknowledged write was gone (the created files absent, the rewritten one back to its old
bytes). Fixed in ``WorkspaceView._stages``: such an open is not staged on a passthrough mount,
and its writes go through the daemon.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough

pytestmark = pytest.mark.fuse


@pytest.mark.parametrize(
    "flags",
    [("--passthrough",), (), ("--writeback-cache",), ("--writes-in-c",)],
    ids=["passthrough", "daemon", "writeback-cache", "writes-in-c"],
)
def test_a_sync_descriptors_returned_writes_survive_kill_9_before_its_close(
    env: FuseEnv, flags: tuple[str, ...]
) -> None:
    if "--passthrough" in flags:
        from fuse_adapter import fuse_ops

        if not fuse_ops.PASSTHROUGH:
            pytest.skip("pyfuse3 built without libfuse >= 3.16")
    name = "w43sync"
    mnt = env.mountpoint(name)
    held: list[int] = []
    try:
        with env.mounted(mnt, "--workspace", name, *flags) as proc:
            if "--passthrough" in flags:
                _wait_passthrough(env, mnt)
            (mnt / "rewritten.log").write_bytes(b"old bytes, acknowledged by a close\n")
            for path, how in (
                ("sync.log", os.O_CREAT | os.O_SYNC),
                ("dsync.log", os.O_CREAT | os.O_DSYNC),
                ("rewritten.log", os.O_TRUNC | os.O_DSYNC),
            ):
                fd = os.open(mnt / path, os.O_WRONLY | how, 0o644)
                held.append(fd)
                assert os.write(fd, b"first line\n") == 11  # durable when it returns
                assert os.write(fd, f"{path}\n".encode()) == len(path) + 1
            # read back through the mount while open: the writes landed (passthrough or not)
            assert (mnt / "sync.log").read_bytes() == b"first line\nsync.log\n"
            _kill_9(proc)  # no close, no fsync: only what O_SYNC acknowledged
            got = _remounted(env, mnt, name)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)  # the mount is gone: ENOTCONN
    assert got.get("sync.log") == b"first line\nsync.log\n"
    assert got.get("dsync.log") == b"first line\ndsync.log\n"
    assert got.get("rewritten.log") == b"first line\nrewritten.log\n"


@pytest.mark.parametrize(
    "flags",
    [(), ("--writeback-cache",), ("--writes-in-c",)],
    ids=["daemon", "writeback-cache", "writes-in-c"],
)
def test_a_per_call_dsync_write_through_the_daemon_survives_kill_9_before_its_close(
    env: FuseEnv, flags: tuple[str, ...]
) -> None:
    """``pwritev2(..., RWF_DSYNC)`` on a plain descriptor (wbreview71): the kernel follows it
    with an FSYNC, as for an ``O_DSYNC`` descriptor, on the daemon path with or without its
    write-back cache. (On a staged file of a ``--passthrough`` mount it does not: docs/writeback.md,
    "O_SYNC and O_DSYNC".)"""
    name = "w71rwf"
    mnt = env.mountpoint(name)
    held: list[int] = []
    try:
        with env.mounted(mnt, "--workspace", name, *flags) as proc:
            (mnt / "old.log").write_bytes(b"acknowledged by a close\n")
            held.append(os.open(mnt / "old.log", os.O_WRONLY))
            # a new file: with --writes-in-c staged, its WRITEs answered in C
            held.append(os.open(mnt / "new.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            for fd in held:
                assert os.pwritev(fd, [b"ACKNOWLEDGED"], 0, os.RWF_DSYNC) == 12  # durable when it returns
            _kill_9(proc)  # no close, no fsync
            got = _remounted(env, mnt, name)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)  # the mount is gone: ENOTCONN
    assert got.get("old.log") == b"ACKNOWLEDGED by a close\n"
    assert got.get("new.log") == b"ACKNOWLEDGED"
