"""A WRITE handler run by pyfuse3's dispatching threads (dispatch.h, a workspace mount's default
request loop) is handed a read-only memoryview of the thread's request buffer, not a ``bytes``
copy of the payload (perf41d, issue 41: that copy was 8.7 % of the daemon's CPU for 1 MiB
WRITEs). Under the trio loop, where a handler's coroutine may outlive the buffer, it still gets
``bytes``. A view that outlives its handler (kept, or a slice of it kept, or a buffer taken
from it held) is refused loudly: an error in the log, the session ends (``main()`` raises EIO),
and the buffer it names is never read into again, so the kept bytes stay the WRITE's own
(tests/fuse/write_view_fs.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuse_adapter.daemon import is_mounted
from tests.fuse.conftest import REPO, wait_until

pytestmark = pytest.mark.fuse

GUARD = 60.0


class ViewFS:
    def __init__(self, root: Path, proc: subprocess.Popen) -> None:
        self.root = root
        self.mnt = root / "mnt"
        self.out = root / "out"
        self.proc = proc

    def write(self, name: str, data: bytes, piece: int) -> None:
        fd = os.open(self.mnt / name, os.O_WRONLY)
        try:
            for off in range(0, len(data), piece):
                assert os.pwrite(fd, data[off : off + piece], off) == len(data[off : off + piece])
        finally:
            os.close(fd)

    def read(self, name: str) -> bytes:
        with open(self.mnt / name, "rb") as f:
            return f.read()

    def handed(self) -> list[str]:
        return (self.out / "handed").read_text().splitlines()

    def log(self) -> str:
        return (self.root / "fs.log").read_text()


def _mount(tmp_path: Path, mode: str) -> Iterator[ViewFS]:
    (tmp_path / "mnt").mkdir()
    (tmp_path / "out").mkdir()
    log = open(tmp_path / "fs.log", "w")  # noqa: SIM115 - closed in teardown
    cmd = [
        sys.executable,
        "-m",
        "tests.fuse.write_view_fs",
        str(tmp_path / "mnt"),
        str(tmp_path / "out"),
        mode,
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    fs = ViewFS(tmp_path, proc)
    try:
        wait_until(lambda: is_mounted(fs.mnt) or proc.poll() is not None, GUARD)
        assert proc.poll() is None, fs.log()
        yield fs
    finally:
        if is_mounted(fs.mnt) and proc.poll() is None:
            subprocess.run(["fusermount3", "-u", str(fs.mnt)], capture_output=True)
        try:
            proc.wait(GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if is_mounted(fs.mnt):  # its daemon died (a failed test): detach it, never leave it
            subprocess.run(["fusermount3", "-uz", str(fs.mnt)], capture_output=True)
        log.close()


@pytest.fixture
def dispatch_fs(tmp_path: Path) -> Iterator[ViewFS]:
    yield from _mount(tmp_path, "dispatch")


@pytest.fixture
def trio_fs(tmp_path: Path) -> Iterator[ViewFS]:
    yield from _mount(tmp_path, "trio")


def test_a_dispatching_thread_hands_the_write_handler_a_read_only_view(dispatch_fs: ViewFS) -> None:
    data = os.urandom(3 * 65536 + 1234)
    dispatch_fs.write("copy-a", data, 65536)
    assert dispatch_fs.read("copy-a") == data  # the handler's copies are the WRITEs' bytes
    handed = dispatch_fs.handed()
    assert len(handed) >= 4 and set(handed) == {"memoryview ro"}, handed
    # many WRITEs, each on a buffer the thread reads the next request into: no mix-up
    more = {f"copy-{i}": os.urandom(65536 + i) for i in range(20)}
    for name, payload in more.items():
        dispatch_fs.write(name, payload, 4096)
    assert {name: dispatch_fs.read(name) for name in more} == more
    assert dispatch_fs.proc.poll() is None, dispatch_fs.log()


def test_the_trio_loop_still_hands_bytes(trio_fs: ViewFS) -> None:
    data = os.urandom(100_000)
    trio_fs.write("copy-a", data, 65536)
    assert trio_fs.read("copy-a") == data
    assert set(trio_fs.handed()) == {"bytes"}
    trio_fs.write("keep-slice-a", data, 65536)  # keeping bytes is harmless there
    assert trio_fs.read("keep-slice-a") == data
    assert trio_fs.proc.poll() is None, trio_fs.log()


def test_the_view_itself_kept_is_released_when_its_handler_returns(dispatch_fs: ViewFS) -> None:
    """The view pyfuse3 made is released after the handler: kept as it is, it names nothing
    (a ValueError on use), so the session goes on; only what holds its buffer past that fails."""
    dispatch_fs.write("keep-view-a", os.urandom(65536), 65536)
    dispatch_fs.write("probe-a", b"x", 1)
    assert (dispatch_fs.out / "probe").read_text().split() == ["released"]
    assert dispatch_fs.proc.poll() is None, dispatch_fs.log()
    assert "kept a view" not in dispatch_fs.log()


@pytest.mark.parametrize("kept", ["slice", "export"])
def test_a_view_kept_past_its_handler_ends_the_session_and_its_buffer_is_never_reused(
    dispatch_fs: ViewFS, kept: str
) -> None:
    first = bytes(range(16)) * 4096  # 64 KiB: one WRITE
    fd = os.open(dispatch_fs.mnt / f"keep-{kept}-a", os.O_WRONLY)
    try:
        assert os.pwrite(fd, first, 0) == len(first)  # answered before the check
    finally:
        with contextlib.suppress(OSError):  # its FLUSH meets the session's end, or its unmount
            os.close(fd)
    # the session is gone; before, the next request was read into the buffer the kept view
    # still named, and answered
    with pytest.raises(OSError):
        dispatch_fs.write("copy-b", b"\xff" * 65536, 65536)
    assert dispatch_fs.proc.wait(GUARD) == 3, dispatch_fs.log()
    log = dispatch_fs.log()
    assert "kept a view of its request buffer" in log and "copy the bytes it keeps" in log, log
    assert "main raised: errno 5" in log, log  # EIO
    assert f"kept: {first[:16].hex()}" in log, log  # still the WRITE's bytes: never read into again
    assert "dispatch_kept: 1" in log, log
