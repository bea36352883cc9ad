"""review19d: WRITEs answered in C (writec19, issue 41; fastwrite.h) as their worst users
would drive them, through one real ``--writes-in-c`` mount under a file size limit
(``tests/fuse/fsize_mount.py``: a ``pwrite`` of the C thread past ``LIMIT`` fails with EFBIG).

What must hold, as on the daemon path (docs/writeback.md, "WRITEs answered in C"):

- a file unlinked while open still answers ``fstat`` with its size, whichever of its handles
  is left open (the one that created it may be gone);
- ``O_APPEND`` handles append, renames and unlinks of an open file keep every byte;
- a handle opened before another's write failed in C is refused at its close, also after its
  own later writes went through Python, and the file goes back to its last fsync;
- a busy ``datahub umount`` while a writer runs: every ``write(2)`` that returned its count is
  in the file afterwards, and nothing past the one write that was in flight.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.fsize_mount import LIMIT
from tests.fuse.libc_mapping import map_shared_readonly
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

MiB = 1024**2
WS = "r19d"


class Mounted:
    def __init__(self, env: FuseEnv, mnt: Path) -> None:
        self.env, self.mnt = env, mnt
        self.log = env.root / f"mount-{mnt.name}.log"


@pytest.fixture(scope="module")
def cw(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> Iterator[Mounted]:
    env = make_env(tmp_path_factory.mktemp("r19d"), moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", WS, "--writes-in-c", module="tests.fuse.fsize_mount"):
        os.listdir(mnt)
        yield Mounted(env, mnt)


def test_fstat_of_an_open_unlinked_file_whose_writes_c_answered(cw: Mounted) -> None:
    """The name goes, the kernel asks GETATTR (an unlink drops its cached attributes) and the
    daemon answered from ``_Staged.opener.attr()`` unpacked as a tuple (a FileAttr): EIO;
    once that first handle closed, InvalidInput from the closed handle: EINVAL."""
    first = os.open(cw.mnt / "u.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(first, b"a" * 1000)
    second = os.open(cw.mnt / "u.bin", os.O_RDWR)
    try:
        os.unlink(cw.mnt / "u.bin")
        assert os.pwrite(first, b"b" * 500, 1000) == 500  # answered in C: the view is not told
        assert os.fstat(first).st_size == 1500
        os.close(first)
        assert os.pwrite(second, b"c" * 500, 1500) == 500
        assert os.fstat(second).st_size == 2000
        assert os.pread(second, 2000, 0) == b"a" * 1000 + b"b" * 500 + b"c" * 500
    finally:
        os.close(second)
    assert not (cw.mnt / "u.bin").exists()


def test_o_append_handles_append_and_a_renamed_open_file_keeps_every_byte(cw: Mounted) -> None:
    one = os.open(cw.mnt / "app.log", os.O_CREAT | os.O_WRONLY | os.O_APPEND | os.O_TRUNC, 0o644)
    two = os.open(cw.mnt / "app.log", os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(20):
            assert os.write(one if i % 2 else two, b"%02d:" % i + b"x" * 4000 + b"\n") == 4004
        os.rename(cw.mnt / "app.log", cw.mnt / "moved.log")
        assert os.write(one, b"after rename\n") == 13
        os.fsync(two)
    finally:
        os.close(one)
        os.close(two)
    want = b"".join(b"%02d:" % i + b"x" * 4000 + b"\n" for i in range(20)) + b"after rename\n"
    assert (cw.mnt / "moved.log").read_bytes() == want
    assert not (cw.mnt / "app.log").exists()


def test_a_handle_opened_before_a_failed_write_is_refused_though_its_own_writes_went_through_python(
    cw: Mounted,
) -> None:
    data = os.urandom(LIMIT + MiB)
    with open(cw.mnt / "two.bin", "wb") as f:
        f.write(data[:MiB])
    a = os.open(cw.mnt / "two.bin", os.O_WRONLY | os.O_TRUNC)
    b = os.open(cw.mnt / "two.bin", os.O_WRONLY)  # published beside ``a``, before the failure
    try:
        with pytest.raises(OSError) as failed:
            for at in range(0, len(data), MiB):
                os.pwrite(a, data[at : at + MiB], at)
        assert failed.value.errno == errno.EFBIG
        assert os.pwrite(b, b"late", 0) == 4  # handed to Python (a failure is recorded): written
        with pytest.raises(OSError) as refused:
            os.fsync(b)
        assert refused.value.errno == errno.EIO
    finally:
        closes = []
        for fd in (a, b):
            try:
                os.close(fd)
            except OSError as exc:
                closes.append(exc.errno)
    assert closes == [errno.EIO, errno.EIO]
    assert (cw.mnt / "two.bin").read_bytes() == data[:MiB]


def test_a_reader_beside_a_failed_write_commits_nothing_and_its_fsync_is_refused(cw: Mounted) -> None:
    """A reader is never published (the kernel sends WRITEs with writable handles): its fsync
    and close must not commit the torn file the writer's failed WRITE left (``_c_torn``)."""
    data = os.urandom(LIMIT + MiB)
    with open(cw.mnt / "r.bin", "wb") as f:
        f.write(data[:MiB])
    w = os.open(cw.mnt / "r.bin", os.O_WRONLY | os.O_TRUNC)
    r = os.open(cw.mnt / "r.bin", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as failed:
            for at in range(0, len(data), MiB):
                os.pwrite(w, data[at : at + MiB], at)
        assert failed.value.errno == errno.EFBIG
        with pytest.raises(OSError) as refused:
            os.fsync(r)
        assert refused.value.errno == errno.EIO
        os.close(r)  # a reader acknowledges nothing: 0, and nothing committed
        r = -1
        assert (cw.mnt / "r.bin").stat().st_size > MiB  # still the torn file: nothing reverted yet
    finally:
        if r >= 0:
            os.close(r)
        with pytest.raises(OSError) as closed:
            os.close(w)
    assert closed.value.errno == errno.EIO
    assert (cw.mnt / "r.bin").read_bytes() == data[:MiB]


def test_an_o_trunc_open_of_a_file_written_in_c_cuts_it_for_every_handle(cw: Mounted) -> None:
    a = os.open(cw.mnt / "t.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        assert os.write(a, b"x" * (2 * MiB)) == 2 * MiB
        b = os.open(cw.mnt / "t.bin", os.O_WRONLY | os.O_TRUNC)  # the same staged file, cut
        try:
            assert os.fstat(a).st_size == 0
            assert os.pwrite(a, b"tail", MiB) == 4
            assert os.pwrite(b, b"head", 0) == 4
        finally:
            os.close(b)
    finally:
        os.close(a)
    assert (cw.mnt / "t.bin").read_bytes() == b"head" + b"\0" * (MiB - 4) + b"tail"


def test_o_direct_writes_answered_in_c_read_back_whole(cw: Mounted) -> None:
    data = os.urandom(MiB + 12_345)
    fd = os.open(cw.mnt / "direct.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        assert os.pwrite(fd, data[:MiB], 0) == MiB
        assert os.pwrite(fd, data[MiB:], MiB) == len(data) - MiB
        assert os.pread(fd, len(data), 0) == data
    finally:
        os.close(fd)
    assert (cw.mnt / "direct.bin").read_bytes() == data


def test_a_release_after_the_close_does_not_acknowledge_another_handles_writes(cw: Mounted) -> None:
    """The first handle's close commits ``acked``; its RELEASE comes at munmap (deterministic
    here; asynchronous after close(2) in general), after an O_TRUNC handle rewrote part of
    the file. That handle's later write fails in C: the file must go back to ``acked``."""
    acked = os.urandom(MiB)
    first = os.open(cw.mnt / "rel.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    assert os.write(first, acked) == MiB
    unmap = map_shared_readonly(first, MiB)  # holds the handle
    os.close(first)  # FLUSH: ``acked`` is committed; no RELEASE yet
    w = os.open(cw.mnt / "rel.bin", os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.pwrite(w, os.urandom(MiB), 0) == MiB  # answered in C, not acknowledged
        unmap()  # the first handle's RELEASE
        with pytest.raises(OSError) as failed:
            for at in range(MiB, LIMIT + MiB, MiB):
                os.pwrite(w, os.urandom(MiB), at)
        assert failed.value.errno == errno.EFBIG
    finally:
        with pytest.raises(OSError):
            os.close(w)  # refused: the file goes back to its last close
    assert (cw.mnt / "rel.bin").read_bytes() == acked


def test_a_file_replaced_by_a_rename_while_written_in_c_leaves_the_new_one_whole(cw: Mounted) -> None:
    old = os.open(cw.mnt / "over.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        assert os.write(old, b"o" * 100_000) == 100_000
        (cw.mnt / "new.bin").write_bytes(b"new")
        os.rename(cw.mnt / "new.bin", cw.mnt / "over.bin")  # the open file loses its name
        assert os.write(old, b"p" * 100_000) == 100_000  # still answered in C, to the nameless file
        assert os.fstat(old).st_size == 200_000
    finally:
        os.close(old)
    assert (cw.mnt / "over.bin").read_bytes() == b"new"
    assert not (cw.mnt / "new.bin").exists()


def test_a_busy_umount_while_a_writer_runs_keeps_every_acknowledged_write_and_nothing_past(
    cw: Mounted,
) -> None:
    """Last: it ends the module's mount. A thread rewrites 16 blocks of 64 KiB in turn, each
    write telling its sequence number, until a write fails; ``datahub umount`` meanwhile
    closes its handle durably (``release_all``) while the C thread may be in a ``pwrite``."""
    block, blocks = 64 * 1024, 16
    fd = os.open(cw.mnt / "busy.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    acked: list[int] = []
    error: list[int] = []
    started = threading.Event()

    def fill(seq: int) -> bytes:
        return seq.to_bytes(8, "little") * (block // 8)

    def writer() -> None:
        try:
            for seq in range(1_000_000):
                try:
                    n = os.pwrite(fd, fill(seq), (seq % blocks) * block)
                except OSError as exc:
                    error.append(exc.errno)
                    return
                assert n == block
                acked.append(seq)
                if seq == 2 * blocks:
                    started.set()
        finally:
            started.set()

    t = threading.Thread(target=writer)
    t.start()
    assert started.wait(60)
    cw.env.cli("umount", str(cw.mnt))
    t.join(120)
    assert not t.is_alive()
    try:
        os.close(fd)
    except OSError as exc:
        assert exc.errno == errno.ENOTCONN
    # ENOTCONN, or ECONNABORTED for the WRITE in flight when the daemon went (fs/fuse/dev.c)
    assert len(error) == 1 and error[0] in (errno.ENOTCONN, errno.ECONNABORTED), error
    cw.env.cli("mount", str(cw.mnt), "--workspace", WS, "--background")
    try:
        got = (cw.mnt / "busy.bin").read_bytes()
    finally:
        cw.env.cli("umount", str(cw.mnt))
    last = acked[-1]
    want = {seq % blocks: seq for seq in range(last - blocks + 1, last + 1)}  # the last of each block
    assert len(got) == blocks * block
    for k in range(blocks):
        seen = got[k * block : (k + 1) * block]
        # the acknowledged write, or the one in flight at the umount (its reply never came)
        flight = [fill(last + 1)] if k == (last + 1) % blocks else []
        assert seen in [fill(want[k]), *flight], (k, want[k], seen[:8])
