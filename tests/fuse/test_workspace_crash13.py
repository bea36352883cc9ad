"""kill -9 of a workspace mount while created files are open and never closed, with
namespace operations beside them (revert13): after the remount every file a close
acknowledged is there as written, and a created file no fsync or close acknowledged is
absent, though a rename journaled it (empty) meanwhile. Before, it came back empty under
its name (docs/writeback.md, "Creating a file commits nothing by itself").
"""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_review11 import _kill_9, _passthrough, _remounted, _wait_passthrough

pytestmark = pytest.mark.fuse


@pytest.mark.parametrize("writes", ["daemon", "passthrough", "writeback-cache"])
def test_created_files_never_closed_are_absent_after_a_rename_and_kill_9(env: FuseEnv, writes: str) -> None:
    flags = {"daemon": [], "passthrough": ["--passthrough"], "writeback-cache": ["--writeback-cache"]}[writes]
    if writes == "passthrough":
        _passthrough(env)
    mnt = env.mountpoint(f"crash13-{writes}")
    moved, old_final = os.urandom(300_000), os.urandom(5000)
    with env.mounted(mnt, "--workspace", "crash13", *flags) as proc:
        if writes == "passthrough":
            _wait_passthrough(env, mnt)
        (mnt / "final").write_bytes(old_final)  # acknowledged by its close
        stream = os.open(mnt / "stream.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(stream, os.urandom(1_000_000))  # never fsynced nor closed
        tmp = os.open(mnt / "tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(tmp, os.urandom(70_000))
        (mnt / "old-name").write_bytes(moved)
        os.rename(mnt / "old-name", mnt / "new-name")  # journals stream.bin and tmp, empty
        os.rename(mnt / "tmp", mnt / "final")  # the rename is acknowledged, tmp's bytes are not
        assert sorted(p.name for p in mnt.iterdir()) == ["final", "new-name", "stream.bin"]
        _kill_9(proc)
        for fd in (stream, tmp):
            with contextlib.suppress(OSError):
                os.close(fd)
        got = _remounted(env, mnt, "crash13")
        assert got == {"new-name": moved}, "a file no fsync or close acknowledged came back"
