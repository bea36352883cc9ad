"""A WRITE answered in C (``--writes-in-c``, fastwrite.h) that its ``pwrite`` could do only in
part is a short write, as POSIX answers one: ``write(2)`` returns the count written, the file
keeps those bytes and its close succeeds; the next write, which can write nothing, fails.

Before (review20a), the WRITE was answered with the error (EFBIG here) though half of it was
in the staged file, the failure was recorded, and the close failed with EIO and reverted the
file. A file size limit (``tests/fuse/fsize_mount.py``: ``RLIMIT_FSIZE`` in the daemon) stops
the ``pwrite`` half way, as a full device or a quota would.

The same holds for a WRITE the daemon answers in Python (fix21): before, ``StagedFile.write``
raised, so the WRITE was answered EFBIG though half of it was in the staged file and the close
failed with EIO. A WRITE reaches the daemon on a ``--writes-in-c`` mount once its handle is out
of the C table: after a close of a ``dup`` of its descriptor (that FLUSH retracts it), its later
writes go through Python. One mount for both paths.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import make_env
from tests.fuse.fsize_mount import LIMIT
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

MiB = 1024**2


@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> Iterator[Path]:
    env = make_env(tmp_path_factory.mktemp("cwrites21"), moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws", "--writes-in-c", module="tests.fuse.fsize_mount"):
        yield mnt


def test_a_write_cut_short_returns_its_count_and_the_file_keeps_it(mnt: Path) -> None:
    data = os.urandom(7 * MiB)
    fd = os.open(mnt / "short.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    try:
        for at in range(0, 6 * MiB, MiB):
            assert os.pwrite(fd, data[at : at + MiB], at) == MiB
        assert os.pwrite(fd, data[6 * MiB :], 6 * MiB) == LIMIT - 6 * MiB  # half of it: the count
    finally:
        os.close(fd)  # nothing failed: the close commits
    assert (mnt / "short.bin").read_bytes() == data[:LIMIT]


def test_the_rest_of_a_short_write_fails_and_writes_nothing(mnt: Path) -> None:
    data = os.urandom(MiB)
    fd = os.open(mnt / "rest.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.pwrite(fd, data, LIMIT - MiB // 4) == MiB // 4
        with pytest.raises(OSError) as failed:
            os.pwrite(fd, data[MiB // 4 :], LIMIT)
        assert failed.value.errno == errno.EFBIG
        assert os.fstat(fd).st_size == LIMIT
    finally:
        with pytest.raises(OSError) as refused:  # a failed write's close, as before: refused
            os.close(fd)
    assert refused.value.errno == errno.EIO


def _through_the_daemon(path: Path) -> int:
    """A descriptor of a new staged file whose WRITEs the daemon answers in Python."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    os.close(os.dup(fd))  # its FLUSH takes the handle out of the C table
    return fd


def test_a_write_cut_short_in_python_returns_its_count_and_the_file_keeps_it(mnt: Path) -> None:
    data = os.urandom(LIMIT + MiB // 2)
    fd = _through_the_daemon(mnt / "short-py.bin")
    try:
        assert os.pwrite(fd, data[: 6 * MiB], 0) == 6 * MiB
        assert os.pwrite(fd, data[6 * MiB : 7 * MiB], 6 * MiB) == LIMIT - 6 * MiB  # half: the count
    finally:
        os.close(fd)  # nothing failed: the close commits
    assert (mnt / "short-py.bin").read_bytes() == data[:LIMIT]


def test_the_rest_of_a_short_write_in_python_fails_and_its_close_is_refused(mnt: Path) -> None:
    data = os.urandom(MiB)
    fd = _through_the_daemon(mnt / "rest-py.bin")
    try:
        assert os.pwrite(fd, data, LIMIT - MiB // 4) == MiB // 4
        with pytest.raises(OSError) as failed:
            os.pwrite(fd, data[MiB // 4 :], LIMIT)
        assert failed.value.errno == errno.EFBIG
        assert os.fstat(fd).st_size == LIMIT
    finally:
        with pytest.raises(OSError) as refused:  # a failed write's close, as before: refused
            os.close(fd)
    assert refused.value.errno == errno.EIO
    assert (mnt / "rest-py.bin").read_bytes() == b""  # reverted to its last close: the dup's, empty
