"""wbreview71: an fsync or close of a workspace file returns while another descriptor keeps
writing the same file, and what was written before it is durable (kill -9 of the daemon,
remount) when it returns.

Before, ``OpenFile.fsync`` waited until *no* write-behind upload of the file was in flight.
A writer filling chunk after chunk through another descriptor starts an upload every few
WRITEs, so one was nearly always in flight and the commit never began: the close(2) (a FLUSH,
which the kernel sends without the inode lock) did not return until the writer stopped. An
fsync(2) through the mount holds the inode's lock in the kernel (``fuse_fsync``), so no WRITE
of the file runs beside its FSYNC; the Workspace API has no such lock and starved there too
(tests/writeback/test_wbreview71_starved.py). Now an fsync waits only for the uploads started
before it was called and copies the bytes of any started since (``OpenFile._snapshot``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.test_workspace_review11 import _kill_9, _remounted
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

PAGE = 16384  # the workspace's chunk size: the writer fills one every WRITE (write-behind)
SPAN = 32 * 1024**2  # the writer rewrites [PAGE, PAGE + SPAN) over and over
BOUND = 60.0  # how long the acknowledgement may take under the writer (before: for ever)
MARK = b"written before the acknowledgement\n" * 30


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint, cache=f"page_size = {PAGE}\n")


def _write_on(path: Path, stop: threading.Event, writes: list[int], errors: list[BaseException]) -> None:
    """Rewrite the file past its first chunk, 64 KiB a call, until ``stop``."""
    block = os.urandom(4 * PAGE)
    fd = os.open(path, os.O_WRONLY)
    try:
        pos = 0
        while not stop.is_set():
            os.pwrite(fd, block, PAGE + pos)
            pos = (pos + len(block)) % SPAN
            writes[0] += 1
    except BaseException as exc:  # reported by the test's thread; after the kill, expected
        errors.append(exc)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


@pytest.mark.parametrize("how", ["fsync", "close"])
def test_an_fsync_or_close_returns_beside_a_busy_writer_and_what_it_acknowledged_survives_kill_9(
    env: FuseEnv, how: str
) -> None:
    name = "w71busy"
    mnt = env.mountpoint(name)
    path = mnt / "ckpt.bin"
    with env.mounted(mnt, "--workspace", name) as proc:
        path.write_bytes(b"\0" * PAGE)
        stop, errors, writes = threading.Event(), [], [0]
        writer = threading.Thread(target=_write_on, args=(path, stop, writes, errors), daemon=True)
        writer.start()
        while writes[0] < 200 and writer.is_alive():  # the writer is under way
            time.sleep(0.01)
        fd = os.open(path, os.O_WRONLY)
        assert os.pwrite(fd, MARK, 0) == len(MARK)
        done = threading.Event()

        def acknowledge() -> None:
            try:
                os.fsync(fd) if how == "fsync" else os.close(fd)
            except BaseException as exc:
                errors.append(exc)
            done.set()

        threading.Thread(target=acknowledge, daemon=True).start()
        returned = done.wait(BOUND)
        while_writing = returned and writer.is_alive()
        stop.set()
        writer.join(60)
        assert done.wait(60), f"the {how} never returned, even once the writer stopped"
        assert not errors, errors
        assert while_writing, (
            f"the {how} did not return in {BOUND:.0f} s while another descriptor wrote the file "
            f"({writes[0]} writes); it returned once the writer stopped"
        )
        _kill_9(proc)
        if how == "fsync":
            with contextlib.suppress(OSError):
                os.close(fd)  # the mount is gone: ENOTCONN
        got = _remounted(env, mnt, name)
    assert got["ckpt.bin"][: len(MARK)] == MARK, f"the {how} returned 0 without the bytes written before it"
