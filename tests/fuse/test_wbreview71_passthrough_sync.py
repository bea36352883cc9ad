"""wbreview71/72: the synchronous writes to a file a ``--passthrough`` mount holds staged
(docs/writeback.md, "O_SYNC and O_DSYNC"), measured on Linux 6.18.44: an ``O_SYNC`` write
through a second open of a file another handle holds staged (with or without ``O_TRUNC``),
and ``pwritev2(RWF_DSYNC)`` through the staged handle itself.

wbreview71 found both gone after a kill -9: the kernel wrote and synced the backing file and
sent the daemon nothing. wbreview72 answers such an ``O_SYNC`` open with the staged file's
backing id and direct I/O, which overrides passthrough for reads and writes: its WRITEs
reach the daemon, which commits each before answering it (these cases failed before). The
``RWF_DSYNC`` case stays a strict xfail: a per-call flag on a passthrough handle never reaches
the daemon; if a kernel ever lets it see one, it passes, and the docs must say so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough

pytestmark = [pytest.mark.fuse, pytest.mark.usefixtures("needs_passthrough")]

RWF_DSYNC_LIMIT = pytest.mark.xfail(
    strict=True, reason="passthrough: the kernel syncs the staged file, the daemon sees no write"
)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("o_sync-open-of-a-staged-file", b"SYNCxxxxxx"),
        ("o_sync-o_trunc-open-of-a-staged-file", b"SYNC"),
        pytest.param("rwf_dsync", b"SYNCxxxxxx", marks=RWF_DSYNC_LIMIT),
    ],
)
def test_a_sync_write_to_a_staged_file_survives_kill_9(env: FuseEnv, how: str, expected: bytes) -> None:
    assert sync_write_then_kill_9(env, "w71ptsync", how).get("f.log") == expected


def sync_write_then_kill_9(
    env: FuseEnv, name: str, how: str, staged_check: Callable[[], None] = lambda: None
) -> dict:
    """A ``--passthrough`` workspace ``name``: ``f.log`` written and fsynced (``xxxxxxxxxx``)
    through one handle, ``staged_check()``, then ``SYNC`` written at 0 synchronously (``how``:
    ``rwf_dsync`` on that handle, else through a second ``O_SYNC`` open, ``O_TRUNC`` too when
    ``how`` says ``o_trunc``), the daemon killed with no close or fsync after it: the
    workspace's files as mounted again."""
    mnt = env.mountpoint(name)
    held: list[int] = []
    try:
        with env.mounted(mnt, "--workspace", name, "--passthrough") as proc:
            _wait_passthrough(env, mnt)
            staged = os.open(mnt / "f.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            held.append(staged)
            assert os.write(staged, b"x" * 10) == 10
            os.fsync(staged)  # acknowledged: "xxxxxxxxxx"
            staged_check()
            if how == "rwf_dsync":
                assert os.pwritev(staged, [b"SYNC"], 0, os.RWF_DSYNC) == 4
            else:
                trunc = os.O_TRUNC if "o_trunc" in how else 0
                second = os.open(mnt / "f.log", os.O_WRONLY | os.O_SYNC | trunc)
                held.append(second)
                assert os.pwrite(second, b"SYNC", 0) == 4
            _kill_9(proc)  # no close, no fsync after the synchronous write
            return _remounted(env, mnt, name)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)  # the mount is gone: ENOTCONN


def test_an_o_sync_handle_beside_passthrough_ones_reads_and_is_read_coherently(env: FuseEnv) -> None:
    """wbreview72: an ``O_APPEND|O_SYNC`` log handle of a file a passthrough handle holds staged
    is served through the daemon (direct I/O beside the same backing id), and both see each
    other's bytes at once: they write one staged file. Each of its writes is committed before
    it returns, with whatever the passthrough handle wrote before it."""
    name = "w72ptcoh"
    mnt = env.mountpoint(name)
    held: list[int] = []
    try:
        with env.mounted(mnt, "--workspace", name, "--passthrough") as proc:
            _wait_passthrough(env, mnt)
            staged = os.open(mnt / "log", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            held.append(staged)
            assert os.write(staged, b"head\n") == 5  # through the kernel, not acknowledged
            sync = os.open(mnt / "log", os.O_RDWR | os.O_APPEND | os.O_SYNC)
            held.append(sync)
            assert os.pread(sync, 100, 0) == b"head\n"
            assert os.write(sync, b"line 1\n") == 7  # appended after the passthrough's bytes
            assert os.pread(staged, 100, 0) == b"head\nline 1\n"
            assert os.pwrite(staged, b"HEAD", 0) == 4
            assert os.pread(sync, 4, 0) == b"HEAD"
            assert os.write(sync, b"line 2\n") == 7
            assert os.fstat(staged).st_size == os.fstat(sync).st_size == 19
            _kill_9(proc)
            got = _remounted(env, mnt, name)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)
    assert got.get("log") == b"HEAD\nline 1\nline 2\n"
