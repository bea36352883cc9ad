"""review31: a reader's close(2) on a workspace mount commits nothing. The kernel sends a FLUSH
for every close, an ``O_RDONLY`` descriptor's too, and the daemon committed the shared open file
then, as it was: ``md5sum`` (or ``tail``, a data loader) closing while a writer was mid-file
made the writer's half-written bytes the file's acknowledged generation. A kill -9 then
brought them back in place of the last close's content, the recovery's ``--commit-to`` put
them in a dataset version, and the writer's close refused for space "reverted" to them. On
a local file system or NFS a reader's close flushes nothing (docs/writeback.md, "A reader's
close commits nothing"). The view-level side: tests/writeback/test_review31_reader.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.late_release import rewrite_past_the_quota_after_a_release
from tests.fuse.test_workspace import _catalog
from tests.fuse.test_workspace_nospace import FLAGS
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough

pytestmark = pytest.mark.fuse

MiB = 1024**2


def _md5sum(path: Path) -> None:
    """What ``md5sum`` does: an O_RDONLY open, a read of the whole file, a close(2) (the FLUSH,
    then the RELEASE). In this process: a child process would inherit the writer's
    descriptor and close it at its exec, a close of the writer's own open file description,
    whose FLUSH commits the file (as a close of any descriptor of a writable file flushes
    it on NFS)."""
    with open(path, "rb") as f:
        hashlib.md5(f.read())


def _rewrite_half(path: Path, half: bytes) -> int:
    """An O_TRUNC rewrite that wrote ``half`` and is still open: nothing of it acknowledged."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    assert os.write(fd, half) == len(half)
    return fd


def _close_after_the_daemon_died(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass  # the daemon is gone: nothing of this close is acknowledged


@pytest.mark.parametrize("flags", FLAGS)
def test_a_crash_after_a_readers_close_keeps_the_last_acknowledged_file(env: FuseEnv, flags: str) -> None:
    name = f"r31-crash-{flags}"
    mnt = env.mountpoint(name)
    acked, half = os.urandom(300_000), os.urandom(100_000)
    with env.mounted(mnt, "--workspace", name, *FLAGS[flags]) as proc:
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        (mnt / "f.bin").write_bytes(acked)  # acknowledged by its close
        fd = _rewrite_half(mnt / "f.bin", half)
        _md5sum(mnt / "f.bin")
        _kill_9(proc)
        _close_after_the_daemon_died(fd)
        assert _remounted(env, mnt, name) == {"f.bin": acked}


def test_the_recovered_version_holds_no_bytes_only_a_reader_closed(env: FuseEnv) -> None:
    """The brief's case: the next commit of the workspace (here the recovery's ``--commit-to``
    at the teardown's umount) puts the file's last acknowledged content in the version."""
    mnt = env.mountpoint("r31-version")
    with _catalog(env) as catalog:
        catalog.create_dataset("outputs31")
    acked, half = os.urandom(300_000), os.urandom(100_000)
    with env.mounted(mnt, "--workspace", "r31-version", "--commit-to", "outputs31") as proc:
        (mnt / "f.bin").write_bytes(acked)
        fd = _rewrite_half(mnt / "f.bin", half)
        _md5sum(mnt / "f.bin")
        _kill_9(proc)
        _close_after_the_daemon_died(fd)
    with _catalog(env) as catalog:
        records = {r.key: r.size for r in catalog.list_records("outputs31", None)}
    assert records == {"f.bin": len(acked)}


def test_a_writers_close_refused_for_space_after_a_readers_close_keeps_the_acknowledged_file(
    env: FuseEnv,
) -> None:
    mnt = env.mountpoint("r31-quota")
    with env.mounted(mnt, "--workspace", "r31-quota", "--quota", str(4 * MiB)):
        acked = os.urandom(MiB)
        (mnt / "f.bin").write_bytes(acked)
        rewrite_past_the_quota_after_a_release(mnt / "f.bin", lambda: _md5sum(mnt / "f.bin"))
        assert (mnt / "f.bin").read_bytes() == acked
