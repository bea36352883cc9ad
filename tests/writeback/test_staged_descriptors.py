"""A daemon short of descriptors (RLIMIT_NOFILE) never fails an open or a close it could
serve without staging (emfile12): each staged file holds a descriptor while it is open, so
files opened past the last ``FD_RESERVE`` descriptors are not staged (they go the way of
``staged=False``, which holds none), and a close's own copy needs no descriptor it cannot
get (``packs.copy_range`` copies with ``pread``/``pwrite`` when no pipe can be made).

The limit is this process's own soft RLIMIT_NOFILE, lowered for the test and put back.
The mount-level case (a real daemon under ``prlimit``) is
tests/fuse/test_workspace_review11.py::test_more_files_open_at_once_than_the_daemon_has_descriptors.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from datahub.writeback.packs import copy_range
from datahub.writeback.staged import FD_RESERVE
from tests.writeback.conftest import CHUNK, Env


def _targets() -> list[str]:
    """What each open descriptor is (``socket:[…]``, a path), for the count and its message."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return found


_sockets_at_limit = [0]  # sockets open when the limit was set: they take from it, uncounted


def _open_count() -> int:
    """Descriptors open, sockets aside: the workspaces here keep their tiers on local disk and
    open none, while a thread another test of the worker left (an S3 client's keep-alive pool,
    a retry) can hold several for seconds (a fresh suite: 50 free where 56 must be, after
    test_review21b_rgw_cover on moto; the twenty-second stop)."""
    return _sockets_at_limit[0] + sum(1 for target in _targets() if not target.startswith("socket:"))


def _held_count() -> int:
    """The descriptors held, not the ones open for an instant: the fewest of a few counts
    0.05 s apart. Why: the count is the whole process's, and a thread another test left (a
    renewal, a retry's socket) opening one for a moment took one off the margin (a fresh
    suite, after test_review14d: 55 free where 56 must be; the sixteenth stop). What staged
    files hold stays held, so every count sees it."""
    counts = []
    for _ in range(5):
        counts.append(_open_count())
        time.sleep(0.05)
    return min(counts)


@pytest.fixture
def few_descriptors() -> Iterator[int]:
    """The soft RLIMIT_NOFILE lowered to the number of descriptors open now plus
    ``FD_RESERVE + 24`` (above the highest open one): room for a few staged files before the
    reserve; put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = os.listdir("/proc/self/fd")
    limit = max(len(open_now) + FD_RESERVE + 24, max(map(int, open_now)) + 2)
    _sockets_at_limit[:] = [sum(1 for t in _targets() if t.startswith("socket:"))]
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _fill_descriptors() -> list[int]:
    """Take every descriptor left (EMFILE for the next open)."""
    taken = []
    while True:
        try:
            taken.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
            return taken


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 30)


@pytest.mark.exclusive  # counts the whole process's descriptors: none an earlier test left
def test_files_past_the_descriptor_reserve_are_not_staged_and_all_commit(
    env: Env, few_descriptors: int
) -> None:
    ws = env.open()
    with ws.open("probe", create=True, truncate=True, staged=True) as fh:  # the staging probes, first
        assert fh.staged_fd >= 0
    handles, data = {}, {}
    for i in range(few_descriptors):
        name = f"f-{i}"
        handles[name] = ws.open(name, create=True, truncate=True, staged=True)
        data[name] = os.urandom(3 * CHUNK + i)  # three chunks and a bit: copies at close
        if handles[name].staged_fd < 0:
            break
    staged = [name for name, fh in handles.items() if fh.staged_fd >= 0]
    assert staged and len(staged) < len(handles), "the last file was not refused staging"
    free = few_descriptors - _held_count()
    assert free >= FD_RESERVE - 8, (
        f"staged files took the reserve: {free} descriptors left: {sorted(_targets())}"
    )
    assert ws.stats()["unstaged_for_fds"] == 1
    taken = _fill_descriptors()  # none left at all: a new file is still served, not staged
    try:
        extra = ws.open("extra", create=True, truncate=True, staged=True)
    finally:
        for fd in taken:
            os.close(fd)
    assert extra.staged_fd < 0 and ws.stats()["unstaged_for_fds"] == 2
    handles["extra"], data["extra"] = extra, os.urandom(2 * CHUNK)
    for name, fh in handles.items():  # the closes copy with the reserve left: every one commits
        if fh.staged_fd >= 0:
            os.pwrite(fh.staged_fd, data[name], 0)  # what the kernel does for a passthrough handle
        else:
            fh.write(0, data[name])
        fh.close()
    ws = env.crash_and_reopen(ws)  # every close was acknowledged: all survive a crash
    assert {name: _read(ws, name) for name in data} == data


def test_a_copy_needs_no_descriptor(tmp_path, few_descriptors: int) -> None:
    """``copy_range`` splices through a pipe; with no descriptor left for one, it copies
    the bytes anyway (a staged file's close must not fail for a pipe)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = os.urandom(3 * 1024**2 + 5)
    src.write_bytes(data)
    src_fd = os.open(src, os.O_RDONLY)
    dst_fd = os.open(dst, os.O_RDWR | os.O_CREAT, 0o600)
    taken = _fill_descriptors()
    try:
        copy_range(src_fd, 0, dst_fd, 10, len(data))
    finally:
        for fd in taken:
            os.close(fd)
        os.close(src_fd)
        os.close(dst_fd)
    assert dst.read_bytes() == bytes(10) + data


def test_a_passthrough_mount_raises_its_soft_descriptor_limit_to_the_hard_one() -> None:
    """Each open staged file holds a descriptor: the mount (``passthrough_on``) lifts the
    soft limit, 1,024 by default, to the hard one. Run in a child, whose limits are its own."""
    code = (
        "import resource\n"
        "from fuse_adapter.workspace import raise_descriptor_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "raise_descriptor_limit('workspace x')\n"
        "print(*resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    soft, hard = map(int, out.split())
    assert soft == hard
