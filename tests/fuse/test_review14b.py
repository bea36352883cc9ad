"""review14b: adversarial checks of this stop's quota and mount-point changes on real mounts.

The quota (``--quota``) counts what a workspace mount holds; a file whose name went while it
was open (``WorkspaceView._nameless``) stays in the count, charged as any file, until its
last close refunds it (quota14; before, its size left the count with its name and only its
growth through the daemon was charged: 04b9d71). These tests grow such files in the ways a
program can (writes, ``ftruncate``), open and drop them many times, and read ``df`` after.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.api.test_audit14 import NOBODY, as_nobody
from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_review14wb import BIG_QUOTA, _available, staged_and_acknowledged
from tests.fuse.test_workspace_nospace import FLAGS, QUOTA, _close_fails_for_space
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough

pytestmark = pytest.mark.fuse


def _charged_back_to(mnt, whole: int, expected: int = 0) -> int:
    """What the quota charges once the RELEASEs (sent after close(2) returns) are in."""

    def charged() -> int:
        return whole - _available(mnt)

    with contextlib.suppress(AssertionError):
        wait_until(lambda: charged() == expected, 30)
    return charged()


def test_an_unlinked_open_file_cannot_pass_the_quota_by_ftruncate(env: FuseEnv) -> None:
    """A named file grown by ``ftruncate`` past the quota is refused (ENOSPC), and writes into
    the hole are charged with it. An unlinked one was not charged at all for the growth, so its
    writes into the hole (below the new size, "no growth") were never charged either: a
    program could fill the shared tier through one unlinked file, past any quota."""
    name = "r14b-nameless-truncate"
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, "--quota", str(QUOTA)):
        whole = _available(mnt)
        fd = os.open(mnt / "named.bin", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            with pytest.raises(OSError) as named:
                os.ftruncate(fd, 4 * QUOTA)
            assert named.value.errno == errno.ENOSPC
        finally:
            os.close(fd)
        os.unlink(mnt / "named.bin")
        assert _charged_back_to(mnt, whole) == 0

        fd = os.open(mnt / "gone.bin", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.unlink(mnt / "gone.bin")
            with pytest.raises(OSError) as nameless:  # main: 0, then 4 MB written uncharged
                os.ftruncate(fd, 4 * QUOTA)
            assert nameless.value.errno == errno.ENOSPC
            # within the quota it grows, charged until its last close
            os.ftruncate(fd, QUOTA // 2)
            assert whole - _available(mnt) >= QUOTA // 2 - 4096  # df counts 4 KiB blocks
            os.pwrite(fd, os.urandom(QUOTA // 4), 0)
        finally:
            os.close(fd)
        assert _charged_back_to(mnt, whole) == 0, "an unlinked file's growth is still charged"


def test_an_unlinked_scratch_file_emptied_and_refilled_stays_within_its_size(env: FuseEnv) -> None:
    """A scratch file (open, unlink, then reused: ``ftruncate(fd, 0)`` and written again, as
    ``tmpfile()`` users do) holds at most one round's bytes, so thirty rounds of a tenth of
    the quota fit. A shrink of an unlinked file refunded nothing, so each round's bytes were
    charged again on top of the last until a write failed with ENOSPC."""
    name = "r14b-scratch"
    mnt = env.mountpoint(name)
    block = os.urandom(QUOTA // 10)
    with env.mounted(mnt, "--workspace", name, "--quota", str(QUOTA)):
        whole = _available(mnt)
        fd = os.open(mnt / "scratch", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.unlink(mnt / "scratch")
            for _ in range(30):  # main: ENOSPC after about ten rounds
                os.ftruncate(fd, 0)
                assert os.pwrite(fd, block, 0) == len(block)
                os.fsync(fd)
            assert os.pread(fd, len(block) + 1, 0) == block
            assert whole - _available(mnt) <= len(block) + 4096  # one round's bytes, in 4 KiB blocks
        finally:
            os.close(fd)
        assert _charged_back_to(mnt, whole) == 0


@pytest.mark.parametrize("flags", FLAGS)
def test_the_quota_comes_back_after_many_files_unlinked_or_replaced_while_open(
    env: FuseEnv, flags: str
) -> None:
    """Fifty rounds of: a file written, unlinked while open, written on; a new file at the same
    path open at once and written; an older one replaced by a rename while open. After the
    closes ``df`` shows exactly what is left (the last round's files)."""
    name = f"r14b-quota-cycles-{flags}"
    mnt = env.mountpoint(name)
    chunk, quota = os.urandom(4096), 100 * QUOTA
    with env.mounted(mnt, "--workspace", name, "--quota", str(quota), *FLAGS[flags]):
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        whole = _available(mnt)
        for i in range(50):
            first = os.open(mnt / "f.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.write(first, chunk)
            os.unlink(mnt / "f.bin")
            second = os.open(mnt / "f.bin", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
            os.write(first, chunk)
            os.write(second, chunk * 2)
            old = os.open(mnt / "old.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.write(old, chunk * 3)
            (mnt / "new.bin").write_bytes(chunk[: i + 1])
            os.rename(mnt / "new.bin", mnt / "old.bin")
            os.write(old, chunk)
            for fd in (first, second, old):
                os.close(fd)
        left = (mnt / "f.bin").stat().st_size + (mnt / "old.bin").stat().st_size
        assert left == 2 * len(chunk) + 50
        # df counts whole 4 KiB blocks of what is left of the quota (100 MB is no whole number of them)
        expected = whole - (quota - left) // 4096 * 4096
        assert _charged_back_to(mnt, whole, expected) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_a_mount_point_its_user_cannot_list_is_refused() -> None:
    """``datahub mount`` refuses a non-empty mount point (9ae6d33), but one its user may enter
    and write (all fusermount3 asks) yet not list (mode 0300) passed as empty: its files were
    mounted over, hidden until the unmount. Unlistable, it cannot be known empty: refused."""
    from fuse_adapter.daemon import check_mountpoint

    base = Path(tempfile.mkdtemp(prefix="r14b-unlistable-", dir="/var/tmp"))  # nobody reaches it
    try:
        base.chmod(0o711)
        mnt = base / "mnt"
        mnt.mkdir()
        (mnt / "results.csv").write_text("the job's outputs")
        os.chown(mnt, NOBODY, NOBODY)
        mnt.chmod(0o300)
        said = as_nobody(lambda: _outcome(lambda: check_mountpoint(str(mnt)))).decode()
    finally:
        shutil.rmtree(base)
    assert said.startswith("InvalidInput: "), said  # main: "allowed"
    assert str(mnt) in said and "cannot be listed" in said


def _outcome(act) -> bytes:
    """What ``act`` did: "allowed", or the error it raised (InvalidInput: the CLI exits 2)."""
    try:
        act()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".encode()
    return b"allowed"


def test_a_revert_of_a_staged_file_refuses_an_appender_and_spares_a_mapped_reader(env: FuseEnv) -> None:
    """``_refuse_dropped`` with the handles review14wb did not try: ``c`` opened
    ``O_WRONLY|O_APPEND`` appends through the kernel, ``m`` is opened ``O_RDONLY`` and mapped
    (``PROT_READ``: it cannot write), and the file is renamed before ``a`` writes past the
    quota. The revert (by file id, at the new name) drops ``c``'s append: ``c``'s close must
    say so (ENOSPC), or the file must hold its bytes; ``m``'s close returns 0; the file reads
    back as the last acknowledged state, also after kill -9 and a fresh mount."""
    name = "r14b-appender"
    acked, tail = os.urandom(100_000), os.urandom(5000)
    with staged_and_acknowledged(env, name, acked) as (mnt, proc, b):
        c = os.open(mnt / "f.bin", os.O_WRONLY | os.O_APPEND)
        assert os.write(c, tail) == len(tail)
        m = os.open(mnt / "f.bin", os.O_RDONLY)
        view = mmap.mmap(m, len(acked), prot=mmap.PROT_READ)
        assert view[:100] == acked[:100]
        os.rename(mnt / "f.bin", mnt / "g.bin")
        a = os.open(mnt / "g.bin", os.O_RDWR)
        assert os.pwrite(a, b"x", 2 * BIG_QUOTA) == 1  # sparse: charged at a's close
        _close_fails_for_space(a)
        try:
            os.close(c)
        except OSError as refused:
            assert refused.errno == errno.ENOSPC
            want = acked
        else:  # 0: its tail must be there
            want = acked + tail
        view.close()
        os.close(m)  # a reader: 0
        with contextlib.suppress(OSError):
            os.close(b)  # a staged writer: refused (the kernel never says whether it wrote)
        assert sorted(os.listdir(mnt)) == ["g.bin"]
        assert (mnt / "g.bin").read_bytes() == want, "a close that returned 0 lost its bytes"
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"g.bin": want}


def test_a_hole_made_before_the_unlink_cannot_be_filled_past_the_quota(env: FuseEnv) -> None:
    """Three files, each cut to 0.9 of the quota while named (charged), unlinked (refunded),
    then filled with 0.9 of the quota of data, all open at once: 2.7 times the quota held by
    the mount, and no write refused. The daemon holds their bytes until their last close."""
    name = "r14b-hole-then-unlink"
    mnt = env.mountpoint(name)
    size = QUOTA * 9 // 10
    with env.mounted(mnt, "--workspace", name, "--quota", str(QUOTA)):
        fds = []
        try:
            with pytest.raises(OSError) as exc:
                for i in range(3):
                    fd = os.open(mnt / f"scratch{i}", os.O_CREAT | os.O_RDWR, 0o644)
                    fds.append(fd)
                    os.ftruncate(fd, size)
                    os.unlink(mnt / f"scratch{i}")
                    os.pwrite(fd, os.urandom(size), 0)
                    os.fsync(fd)
            assert exc.value.errno == errno.ENOSPC
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
