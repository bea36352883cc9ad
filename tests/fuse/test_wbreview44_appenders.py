"""wbreview44: writers appending lines to shared files on a workspace mount, each line followed
by an fsync or a close; the daemon is killed (kill -9) while they write, and after a remount
every line whose fsync or close returned 0 before the kill is in its file, whole.

The interleavings of tests/writeback/test_wbreview44_races.py (a write or truncate during
another handle's commit or upload: the commit journaled older bytes, or cleared the file's
dirty state of a later change) as a mount meets them: the daemon runs WRITEs, FSYNCs and
FLUSHes of one file side by side, from several descriptors. Chunks of 16 KiB and lines of up
to 3 KB, so appends fill chunks (write-behind uploads) while other writers' fsyncs upload and
commit partial last chunks. The kill -9 comes mid-stream (an unmount, or a kill once the
writers stopped, finds the last closes' commits holding every line, whatever an earlier
commit left out), so it checks what the journal held at each acknowledgement.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import threading
import time
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.test_workspace_review11 import _kill_9, _remounted
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

PAGE = 16384  # the workspace's chunk size (cache.page_size at its creation)
SECONDS = 2.0  # how long the writers append at least
FILES = ("a.log", "b.log")
#: (file, how each line is acknowledged): two writers a file, one fsyncing an open
#: descriptor, one opening, appending and closing each line
WRITERS = [
    (FILES[0], "fsync"),
    (FILES[0], "close"),
    (FILES[1], "fsync"),
    (FILES[1], "close"),
    (FILES[1], "fsync"),
]


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint, cache=f"page_size = {PAGE}\n")


def _line(writer: int, seq: int, rng: random.Random) -> bytes:
    head = f"w{writer} #{seq:05d} "
    return (head + "x" * rng.randint(100, 3000) + f" w{writer} #{seq:05d}\n").encode()


def _write(fd: int, line: bytes, killed: threading.Event) -> None:
    """The whole line, or OSError once the daemon is gone (a WRITE it died in is short)."""
    n = os.write(fd, line)
    if n != len(line):
        if killed.is_set():
            raise OSError(errno.ENOTCONN, f"short write ({n} of {len(line)} bytes) as the daemon died")
        raise AssertionError(f"a write of {len(line)} bytes wrote {n}")


def _append(
    mnt: Path, writer: int, name: str, how: str, killed: threading.Event, acked: list, errors: list
) -> None:
    """Append lines until the daemon is gone; each acknowledged one goes to ``acked`` with
    the time its fsync or close returned (the test keeps those before the kill)."""
    rng = random.Random(writer)
    path = mnt / name
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if how == "fsync" else -1
    try:
        seq = 0
        while not killed.is_set():
            line = _line(writer, seq, rng)
            if how == "fsync":
                _write(fd, line, killed)
                os.fsync(fd)
            else:
                one = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    _write(one, line, killed)
                finally:
                    os.close(one)  # raises if the close's commit failed: then not acknowledged
            acked.append((time.monotonic(), line))  # its fsync or close returned 0
            seq += 1
    except BaseException as exc:  # reported by the test's thread; after the kill, expected
        if not (killed.is_set() and isinstance(exc, OSError)):
            errors.append(exc)
    finally:
        if fd >= 0:
            with contextlib.suppress(OSError):  # the mount is gone: ENOTCONN
                os.close(fd)


@pytest.mark.parametrize("flags", [(), ("--writeback-cache",)], ids=["daemon", "writeback-cache"])
def test_every_line_an_fsync_or_close_acknowledged_is_there_after_kill_9(
    env: FuseEnv, flags: tuple[str, ...]
) -> None:
    name = "w44app"
    mnt = env.mountpoint(name)
    acked: list[list[tuple[float, bytes]]] = [[] for _ in WRITERS]
    errors: list[BaseException] = []
    with env.mounted(mnt, "--workspace", name, *flags) as proc:
        for file in FILES:
            (mnt / file).write_bytes(b"")
        killed = threading.Event()
        threads = [
            threading.Thread(target=_append, args=(mnt, w, file, how, killed, acked[w], errors), daemon=True)
            for w, (file, how) in enumerate(WRITERS)
        ]
        for thread in threads:
            thread.start()
        # at least SECONDS, and until every writer has lines to lose (a loaded machine's fsyncs
        # are slow: the test waits for work done, not for a time)
        deadline = time.monotonic() + 60
        time.sleep(SECONDS)
        while min(len(a) for a in acked) <= 6 and time.monotonic() < deadline and not errors:
            time.sleep(0.1)
        at = time.monotonic()  # what returned before this was acknowledged by a live daemon
        killed.set()
        _kill_9(proc)
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads), "a writer hung"
        assert not errors, errors
        got = _remounted(env, mnt, name)
    for w, (file, _how) in enumerate(WRITERS):
        before = [line for t, line in acked[w] if t < at]
        assert len(before) > 5, f"writer {w} acknowledged only {len(before)} lines in 60 s"
        lines = set(got.get(file, b"").splitlines(keepends=True))
        lost = [line[:12] for line in before if line not in lines]
        assert not lost, (
            f"{file}: {len(lost)} of writer {w}'s {len(before)} acknowledged lines lost: {lost[:5]}"
        )
