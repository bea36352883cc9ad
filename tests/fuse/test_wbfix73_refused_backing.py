"""wbfix73: synchronous writes to a staged file the kernel would not take as a backing file,
on a real ``--passthrough`` workspace mount (docs/writeback.md, "O_SYNC and O_DSYNC").

Such a file (here: staged on an overlayfs, which the kernel refuses to stack under a FUSE
file: ELOOP) is served through the daemon with direct I/O, and the kernel follows no
direct-I/O write with an FSYNC, not even an ``O_SYNC`` descriptor's or a
``pwritev2(RWF_DSYNC)``. Each such WRITE is committed before it is answered
(``WorkspaceView.write``). Before, both returned uncommitted: after a kill -9 of the daemon
the file held what its last fsync had committed.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_wbreview71_passthrough_sync import sync_write_then_kill_9

pytestmark = [pytest.mark.fuse, pytest.mark.usefixtures("needs_passthrough")]


@contextlib.contextmanager
def _overlay(at: Path, base: Path) -> Iterator[None]:
    """An overlayfs at ``at`` (a workspace's staging directory, made before its mount)."""
    dirs = {d: base / d for d in ("lower", "upper", "work")}
    for d in (*dirs.values(), at):
        d.mkdir(parents=True)
    opts = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", opts, str(at)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount an overlayfs here: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        if subprocess.run(["umount", str(at)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(at)], capture_output=True)


@pytest.mark.parametrize("how", ["o_sync-open", "rwf_dsync"])
def test_a_sync_write_to_a_staged_file_served_with_direct_io_survives_kill_9(env: FuseEnv, how: str) -> None:
    name = "w73ovl"
    staging = env.root / "var" / "cache" / "shared" / "writeback-staging" / name  # Workspace.staging

    def refused() -> None:
        log = (env.root / f"mount-{env.mountpoint(name).name}.log").read_text()
        assert "backing file refused" in log  # staged, served through the daemon

    with _overlay(staging, env.root / "overlay"):
        got = sync_write_then_kill_9(env, name, how, refused)
    assert got.get("f.log") == b"SYNCxxxxxx"
