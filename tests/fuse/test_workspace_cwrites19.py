"""WRITEs of a workspace's staged files answered in C (issue 41, writec19; docs/writeback.md,
"WRITEs answered in C"; third_party/pyfuse3/src/pyfuse3/fastwrite.h).

One real mount for the file (``--writes-in-c``: no passthrough, so every WRITE reaches the
daemon), run under a file size limit (``tests/fuse/fsize_mount.py``) so that a ``pwrite``
of the C thread can be made to fail: past ``LIMIT`` it fails with EFBIG. What must hold:

- a new file's WRITEs are answered in C, and reads of the file while it is written see its
  bytes (the daemon's READ preads the staged file, the page cache holds what was written);
- a WRITE that failed in C fails the write(2) that made it, and the file is never committed
  torn: the close is refused and the file goes back to its last fsync;
- the mount says so at start, and counts at unmount what C answered.
"""

from __future__ import annotations

import ast
import errno
import mmap
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuse_adapter.fast_path import Build, c_writes_off
from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.fsize_mount import LIMIT
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

MiB = 1024**2


class Mounted:
    def __init__(self, env: FuseEnv, mnt: Path) -> None:
        self.env, self.mnt = env, mnt
        self.log = env.root / f"mount-{mnt.name}.log"


@pytest.fixture(scope="module")
def cw(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> Iterator[Mounted]:
    env = make_env(tmp_path_factory.mktemp("cwrites"), moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws", "--writes-in-c", module="tests.fuse.fsize_mount"):
        yield Mounted(env, mnt)


def test_a_new_files_writes_are_answered_in_c_and_reads_see_them_while_it_is_written(cw: Mounted) -> None:
    os.listdir(cw.mnt)  # after the INIT, whose handler logged how writes go
    assert "staged files' WRITEs answered in C" in cw.log.read_text()
    data = os.urandom(3 * MiB + 100_000)
    fd = os.open(cw.mnt / "a.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC)
    try:
        for at in range(0, len(data), MiB):
            assert os.pwrite(fd, data[at : at + MiB], at) == len(data[at : at + MiB])
        assert os.pread(fd, 200_000, MiB - 100_000) == data[MiB - 100_000 : MiB + 100_000]
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the READs reach the daemon
        assert os.pread(fd, len(data), 0) == data
        with mmap.mmap(fd, len(data)) as m:  # a shared mapping's write-back: a cached WRITE
            m[10:13] = b"xyz"
        os.fsync(fd)
    finally:
        os.close(fd)
    data = data[:10] + b"xyz" + data[13:]
    assert (cw.mnt / "a.bin").read_bytes() == data
    with open(cw.mnt / "small.txt", "w") as f:  # a small file: committed as one chunk
        f.write("hello\n")
    assert (cw.mnt / "small.txt").read_text() == "hello\n"


def test_a_write_that_failed_in_c_fails_its_write_and_its_close_and_nothing_torn_is_committed(
    cw: Mounted,
) -> None:
    data = os.urandom(LIMIT + MiB)
    acked = 4 * MiB
    fd = os.open(cw.mnt / "torn.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    try:
        for at in range(0, acked, MiB):
            os.pwrite(fd, data[at : at + MiB], at)
        os.fsync(fd)  # acknowledged: what the file goes back to
        with pytest.raises(OSError) as failed:
            # the call at 6 MiB writes half and returns that count (a short write, leftovers21);
            # the call at 7 MiB, past the limit, writes nothing and fails
            for at in range(acked, len(data), MiB):
                os.pwrite(fd, data[at : at + MiB], at)
        assert failed.value.errno == errno.EFBIG
    finally:
        with pytest.raises(OSError) as refused:
            os.close(fd)
    assert refused.value.errno == errno.EIO  # StorageError: "a write ... failed", not space
    assert (cw.mnt / "torn.bin").read_bytes() == data[:acked]
    # the file is usable again: a new handle is published afresh, with no failure recorded
    with open(cw.mnt / "torn.bin", "wb") as f:
        f.write(data[:MiB])
    assert (cw.mnt / "torn.bin").read_bytes() == data[:MiB]


def test_a_handle_opened_after_a_failed_write_is_refused_too_and_nothing_torn_is_committed(
    cw: Mounted,
) -> None:
    """The staged file has no reservation here (every write is seen): a handle opened while
    it holds a torn write must not commit it. Without the failure inherited at publish, the
    second handle's close returned 0 and committed the torn 6.5 MiB."""
    data = os.urandom(LIMIT + MiB)
    with open(cw.mnt / "late.bin", "wb") as f:
        f.write(data[:MiB])
    fd = os.open(cw.mnt / "late.bin", os.O_WRONLY | os.O_TRUNC)
    try:
        with pytest.raises(OSError) as failed:
            for at in range(0, len(data), MiB):
                os.pwrite(fd, data[at : at + MiB], at)
        assert failed.value.errno == errno.EFBIG
        late = os.open(cw.mnt / "late.bin", os.O_WRONLY)  # the same staged file, after the failure
        with pytest.raises(OSError) as refused:
            os.close(late)
        assert refused.value.errno == errno.EIO
        assert (cw.mnt / "late.bin").read_bytes() == data[:MiB]
    finally:
        with pytest.raises(OSError):
            os.close(fd)
    assert (cw.mnt / "late.bin").read_bytes() == data[:MiB]


def test_writes_in_c_are_off_where_they_would_change_what_the_mount_promises() -> None:
    build = Build(fastloop=True, fastwrite=True)
    flags = {"asked": True, "passthrough": False, "writeback_cache": False, "quota": False}
    assert c_writes_off(**flags, build=build) == ""
    assert c_writes_off(**{**flags, "asked": False}, build=build).startswith("the default")
    assert "--passthrough" in c_writes_off(**{**flags, "passthrough": True}, build=build)
    assert "--writeback-cache" in c_writes_off(**{**flags, "writeback_cache": True}, build=build)
    assert "--quota" in c_writes_off(**{**flags, "quota": True}, build=build)
    assert "C fast path" in c_writes_off(**flags, build=Build(fastloop=True))


def test_the_cli_refuses_writes_in_c_with_a_quota(cw: Mounted) -> None:
    mnt = cw.env.mountpoint("refused")
    proc = cw.env.cli(
        "mount", str(mnt), "--workspace", "other", "--writes-in-c", "--quota", "99999999", check=False
    )
    assert proc.returncode != 0 and "--writes-in-c applies to --workspace mounts without" in proc.stderr


def test_the_mount_counts_the_writes_it_answered_in_c_at_unmount(cw: Mounted) -> None:
    cw.env.umount(cw.mnt)
    said = re.findall(r"WRITEs answered in C: (\{.*\})", cw.log.read_text())
    assert said, cw.log.read_text()[-2000:]
    counts = ast.literal_eval(said[-1])  # a dict of ints, as the daemon logged it
    assert counts["writes"] >= 4 + 4 + 2 + 1 + 6 and counts["failed"] == 2 and counts["handles"] == 0
    assert counts["bytes"] >= 3 * MiB + 4 * MiB + 2 * MiB
