"""Passthrough writes of a workspace mount (issue 41): the FUSE view's side without FUSE
(backing ids, quota), and a real mount whose writes never reach the daemon.

The view tests run ``fuse_adapter.workspace.WorkspaceView`` over a real workspace with a
recording stand-in for the kernel's backing-file ioctls, and write each staged file the
way the kernel does for a passthrough handle (``os.pwrite`` on the staged file).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import signal
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from datahub.errors import NoSpace
from fuse_adapter.quota import Quota
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.writeback.conftest import Env

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2


class Kernel:
    """Records BACKING_OPEN/CLOSE; ``refuse`` makes BACKING_OPEN fail with that errno."""

    def __init__(self, refuse: int = 0) -> None:
        self.refuse = refuse
        self.open_ids: dict[int, int] = {}  # backing id -> fd
        self.next_id = 1

    def open(self, fd: int) -> int:
        if self.refuse:
            raise OSError(self.refuse, os.strerror(self.refuse))
        self.open_ids[self.next_id] = fd
        self.next_id += 1
        return self.next_id - 1

    def close(self, backing_id: int) -> None:
        del self.open_ids[backing_id]


def view_of(env: Env, kernel: Kernel | None = None, quota: Quota | None = None) -> WorkspaceView:
    view = WorkspaceView(env.open(), quota=quota)
    view.passthrough_on(kernel or Kernel())
    return view


def kernel_write(view: WorkspaceView, fh: int, offset: int, data: bytes) -> None:
    os.pwrite(view._handles[fh][1].staged_fd, data, offset)


def test_all_handles_of_a_staged_inode_share_one_backing_id(env: Env) -> None:
    kernel = Kernel()
    view = view_of(env, kernel)
    fh, st, backing, direct = view.create(ROOT_INODE, "a", exclusive=False)
    assert backing and not direct
    fh2, backing2, _ = view.open(st.ino, truncate=False)  # a reader: the kernel demands the same file
    assert backing2 == backing and len(kernel.open_ids) == 1
    kernel_write(view, fh, 0, b"hello")
    assert view.read(fh2, 0, 10) == b"hello" and view.getattr(st.ino).size == 5
    view.flush(fh)
    view.release(fh)
    assert kernel.open_ids  # still one handle
    view.release(fh2)
    assert kernel.open_ids == {}
    assert view.ws.journal_record("a")["size"] == 5


def test_an_existing_file_not_truncated_is_written_through_the_daemon(env: Env) -> None:
    view = view_of(env)
    fh, st, _, _ = view.create(ROOT_INODE, "a", exclusive=False)
    kernel_write(view, fh, 0, b"old")
    view.flush(fh)
    view.release(fh)
    fh, backing, direct = view.open(st.ino, truncate=False)
    assert (backing, direct) == (0, False)
    view.write(fh, 3, b"+new")
    view.release(fh)
    assert view.ws.journal_record("a")["size"] == 7


def test_a_refused_backing_file_turns_passthrough_off_and_the_file_still_works(env: Env) -> None:
    view = view_of(env, Kernel(refuse=errno.EPERM))  # no CAP_SYS_ADMIN
    fh, st, backing, direct = view.create(ROOT_INODE, "a", exclusive=False)
    assert backing == 0 and direct  # served through the daemon, from its staged file
    view.write(fh, 0, b"via daemon")
    view.release(fh)
    assert view.writes.startswith("off: backing file refused")
    assert view.create(ROOT_INODE, "b", exclusive=False)[2:] == (0, False)  # not staged any more
    fh, _ = view.open(st.ino, truncate=False)[:2]
    assert view.read(fh, 0, 100) == b"via daemon"


def test_the_quota_is_charged_at_flush_and_a_file_past_it_is_discarded(env: Env, monkeypatch) -> None:
    monkeypatch.setattr("fuse_adapter.workspace.STAGE_HEADROOM", 0)
    quota = Quota(10_000)
    view = view_of(env, quota=quota)
    fh, _, backing, _ = view.create(ROOT_INODE, "a", exclusive=False)
    assert backing
    kernel_write(view, fh, 0, b"a" * 6000)  # the kernel does not ask
    view.flush(fh)
    assert quota.used == 6000
    view.release(fh)
    fh, _, backing, _ = view.create(ROOT_INODE, "b", exclusive=False)
    kernel_write(view, fh, 0, b"b" * 6000)
    with pytest.raises(NoSpace):
        view.flush(fh)  # close(2) fails with ENOSPC, the file is gone
    view.release(fh)
    assert [name for name, _ in view.ws.listdir("")] == ["a"]
    assert quota.used == 6000


@pytest.mark.parametrize("staged", [True, False])
def test_a_close_past_the_quota_reverts_the_file_to_its_last_fsync(
    env: Env, monkeypatch, staged: bool
) -> None:
    """docs/writeback.md, "Out of space at close": the close fails with ENOSPC and the file
    holds what its fsync acknowledged, staged or not; the quota counts exactly that."""
    monkeypatch.setattr("fuse_adapter.workspace.STAGE_HEADROOM", 0 if staged else 10**12)
    quota = Quota(10_000)
    view = view_of(env, quota=quota)
    fh, st, backing, _ = view.create(ROOT_INODE, "a", exclusive=False)
    assert bool(backing) is staged
    write = partial(kernel_write, view) if staged else view.write
    write(fh, 0, b"a" * 4000)
    view.fsync(fh)
    view.truncate(st.ino, 1000, fh)  # changes after the fsync: none of them is kept
    if staged:
        write(fh, 1000, b"b" * 12_000)
    else:
        with pytest.raises(NoSpace):
            write(fh, 1000, b"b" * 12_000)
    with pytest.raises(NoSpace):
        view.flush(fh)
    assert view.ws.stat("a").size == 4000 and quota.used == 4000
    view.release(fh)
    fh = view.open(view.lookup(ROOT_INODE, "a").ino, truncate=False)[0]
    assert view.read(fh, 0, 20_000) == b"a" * 4000
    view.release(fh)
    assert view.ws.journal_record("a")["size"] == 4000 and quota.used == 4000


def test_an_fsync_past_the_quota_discards_nothing(env: Env, monkeypatch) -> None:
    """docs/semantics.md: an explicit fsync failing with ENOSPC discards nothing; a close
    after the writer cut the file back saves it."""
    monkeypatch.setattr("fuse_adapter.workspace.STAGE_HEADROOM", 0)
    quota = Quota(10_000)
    view = view_of(env, quota=quota)
    fh, st, _, _ = view.create(ROOT_INODE, "a", exclusive=False)
    kernel_write(view, fh, 0, b"a" * 12_000)
    with pytest.raises(NoSpace):
        view.fsync(fh)
    view.truncate(st.ino, 5000, fh)
    view.flush(fh)
    view.release(fh)
    assert view.ws.journal_record("a")["size"] == 5000 and quota.used == 5000


def test_a_staged_truncate_is_charged_from_what_was_charged(env: Env, monkeypatch) -> None:
    monkeypatch.setattr("fuse_adapter.workspace.STAGE_HEADROOM", 0)
    quota = Quota(10_000)
    view = view_of(env, quota=quota)
    fh, st, _, _ = view.create(ROOT_INODE, "a", exclusive=False)
    kernel_write(view, fh, 0, b"a" * 4000)  # not charged yet
    with pytest.raises(NoSpace):
        view.truncate(st.ino, 10_001, fh)
    view.truncate(st.ino, 9000, fh)
    assert quota.used == 9000
    view.truncate(st.ino, 100, fh)
    assert quota.used == 100
    view.flush(fh)
    view.release(fh)
    assert quota.used == 100 and view.ws.journal_record("a")["size"] == 100


def test_near_the_quota_files_are_not_staged(env: Env) -> None:
    quota = Quota(1 * MiB)  # less than STAGE_HEADROOM left: every write is charged as it comes
    view = view_of(env, quota=quota)
    fh, _, backing, _ = view.create(ROOT_INODE, "a", exclusive=False)
    assert backing == 0
    with pytest.raises(NoSpace):
        view.write(fh, 0, b"x" * (MiB + 1))


# --- a real mount ---------------------------------------------------------------------------------
@pytest.fixture
def fuse_env(tmp_path: Path, s3_endpoint) -> Iterator:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    from tests.fuse.conftest import make_env

    yield make_env(tmp_path / "fuse", s3_endpoint)


@pytest.mark.fuse
def test_a_mount_writes_without_write_requests_and_close_is_durable(fuse_env) -> None:
    from fuse_adapter import fuse_ops
    from tests.fuse.conftest import wait_until

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")
    mnt = fuse_env.mountpoint("ws")
    data = os.urandom(3 * MiB + 11)
    with fuse_env.mounted(mnt, "--workspace", "ws", "--passthrough") as proc:
        log = (fuse_env.root / "mount-ws.log").read_text()
        wait_until(lambda: "writes: passthrough" in (fuse_env.root / "mount-ws.log").read_text(), 10)
        with FuseRequests(str(mnt)) as reqs:
            fd = os.open(mnt / "ckpt.pt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            for off in range(0, len(data), MiB):
                os.write(fd, data[off : off + MiB])
            assert (mnt / "ckpt.pt").read_bytes() == data  # a reader sees the bytes being written
            os.close(fd)  # durable in the shared tier and journaled when this returns
        assert reqs.counts()["FUSE_FLUSH"] >= 1 and reqs.counts()["FUSE_WRITE"] == 0, (reqs.counts, log)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with reopened(fuse_env, "ckpt.pt") as fh:
        assert fh.read(0, len(data) + 1) == data


@contextlib.contextmanager
def reopened(fuse_env, path: str) -> Iterator:
    """A handle of ``path`` in workspace "ws" as a new opener finds it (after the daemon's
    kill -9: what recovery gives)."""
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    with StoreRegistry(fuse_env.config) as stores:
        ws = open_workspace("ws", fuse_env.config, stores, background=False)
        try:
            with ws.open(path) as fh:
                yield fh
        finally:
            ws.close()


def staged_bytes_held(pid: int) -> int:
    """The most blocks (bytes) any staged file of the daemon ``pid`` holds, reserved ones
    included: its anonymous files under ``writeback-staging``, seen through /proc."""
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if "writeback-staging" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                held = max(held, os.stat(f"/proc/{pid}/fd/{fd}").st_blocks * 512)
    return held


@pytest.mark.fuse
def test_a_stream_far_past_the_first_reservation_is_committed_at_close(fuse_env) -> None:
    """Blocker (a) of docs/writeback.md point 7 through a real mount: one file written in
    1 MiB calls with no fsync, 2.5 times what was reserved when it was made (``torch.save``
    of a big checkpoint). The kernel's passthrough writes reach the watcher (inotify
    ``IN_MODIFY`` on the staged inode), which reserves ahead, so the close commits the file.
    Before each write the test waits until the staged file holds blocks past it: what is
    checked is that the reservation follows the writer, not how fast. The daemon's first
    reservation is 4 MiB, not 64 (tests/writeback/small_reserve_mount.py): the same paths
    on 10 MiB instead of 160, whose flush by the recovery after the kill cost most of the
    test."""
    from fuse_adapter import fuse_ops
    from tests.fuse.conftest import wait_until
    from tests.writeback.small_reserve_mount import RESERVE

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")
    mnt = fuse_env.mountpoint("ws")
    first = RESERVE // MiB
    pieces = first * 5 // 2
    with fuse_env.mounted(
        mnt, "--workspace", "ws", "--passthrough", module="tests.writeback.small_reserve_mount"
    ) as proc:
        wait_until(lambda: "writes: passthrough" in (fuse_env.root / "mount-ws.log").read_text(), 10)
        fd = os.open(mnt / "big.pt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        wait_until(lambda: staged_bytes_held(proc.pid) > 0, 30)
        assert staged_bytes_held(proc.pid) <= RESERVE  # the lowered first reservation took
        for i in range(pieces):
            wait_until(lambda i=i: staged_bytes_held(proc.pid) > (i + 1) * MiB, 30)
            os.write(fd, i.to_bytes(4, "little") * (MiB // 4))
        os.close(fd)  # ENOSPC here before the watcher: past the reservation with no fsync
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with reopened(fuse_env, "big.pt") as fh:
        for i in (0, first - 1, first, (first + pieces) // 2, pieces - 1):
            assert fh.read(i * MiB, MiB) == i.to_bytes(4, "little") * (MiB // 4)
        assert fh.read(pieces * MiB, 1) == b""


@pytest.mark.fuse
@pytest.mark.parametrize("flags", [(), ("--no-passthrough",)], ids=["default", "no-passthrough"])
def test_by_default_writes_go_through_the_daemon(fuse_env, flags) -> None:
    """Staged files are opt-in (--passthrough; docs/writeback.md says why): through the
    daemon every write is a WRITE and msync an FSYNC."""
    mnt = fuse_env.mountpoint("ws")
    with fuse_env.mounted(mnt, "--workspace", "ws", *flags):
        with FuseRequests(str(mnt)) as reqs:
            (mnt / "a").write_bytes(b"x" * 100_000)
        assert reqs.counts()["FUSE_WRITE"] >= 1
        assert (mnt / "a").read_bytes() == b"x" * 100_000
    log = (fuse_env.root / "mount-ws.log").read_text()
    assert "writes: passthrough" not in log and "writes go through the daemon" in log


def _committed(fuse_env, path: str) -> bytes | None:
    """What the workspace's journal holds for ``path`` once the mount is gone, or None."""
    from datahub.errors import NotFound
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    with StoreRegistry(fuse_env.config) as stores:
        ws = open_workspace("ws", fuse_env.config, stores, background=False)
        try:
            with ws.open(path) as fh:
                return fh.read(0, 1 << 30)
        except NotFound:
            return None
        finally:
            ws.close()


@contextlib.contextmanager
def _passthrough_mount(fuse_env) -> Iterator[tuple[Path, int]]:
    """A workspace mount writing through passthrough (mountpoint, daemon pid); unmounted
    cleanly at the end."""
    from fuse_adapter import fuse_ops
    from tests.fuse.conftest import wait_until

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")
    mnt = fuse_env.mountpoint("ws")
    log = fuse_env.root / "mount-ws.log"
    with fuse_env.mounted(mnt, "--workspace", "ws", "--passthrough") as proc:
        wait_until(lambda: "writes: passthrough" in log.read_text(), 10)
        yield mnt, proc.pid
    assert proc.returncode == 0, log.read_text()


def _staged_files_of(pid: int) -> list[str]:
    """The staged files (anonymous files under a staging directory) process ``pid`` holds."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if "staging" in target and target.endswith("(deleted)"):
                found.append(target)
    return found


def _map(path: Path, size: int) -> mmap.mmap:
    """numpy.memmap's way: open, size, map shared+writable, close the descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)  # FLUSH: commits the zeros; Python's mmap keeps a dup of the descriptor


@pytest.mark.fuse
def test_numpy_memmap_outputs_are_committed(fuse_env) -> None:
    """numpy.memmap opens the file, maps it, closes its descriptor, and the program stores
    through the mapping and flushes (msync): committed when the mapping goes, because
    Python's mmap keeps a dup of the descriptor, whose close is a FLUSH and RELEASE after
    the stores (docs/semantics.md)."""
    import numpy as np

    data = np.frombuffer(os.urandom(2 * MiB + 8), dtype=np.uint8)
    with _passthrough_mount(fuse_env) as (mnt, pid):
        out = np.memmap(mnt / "out.npy", dtype=np.uint8, mode="w+", shape=data.shape)
        assert _staged_files_of(pid)  # staged: the kernel maps the staged file itself
        out[:] = data
        out.flush()
        del out
        assert (mnt / "out.npy").read_bytes() == data.tobytes()
    assert _committed(fuse_env, "out.npy") == data.tobytes()


@pytest.mark.fuse
def test_a_staged_file_unlinked_while_mapped_is_not_resurrected(fuse_env) -> None:
    with _passthrough_mount(fuse_env) as (mnt, pid):
        mapping = _map(mnt / "gone", 100_000)
        assert _staged_files_of(pid)
        mapping[:5] = b"early"
        os.unlink(mnt / "gone")
        mapping[:5] = b"after"  # the file is unlinked: its last close must not commit it
        mapping.flush()
        mapping.close()
        assert not (mnt / "gone").exists()
    assert _committed(fuse_env, "gone") is None


def _libc() -> ctypes.CDLL:
    """mmap(2), msync(2) and munmap(2) as C code calls them (tests/pagecache.py)."""
    from tests.pagecache import libc

    return libc


@pytest.mark.fuse
def test_stores_through_a_raw_mapping_after_the_last_close_are_committed(fuse_env) -> None:
    """A C program's way: mmap(2), close(2), store, msync, munmap, with no descriptor left.
    The mapping holds the kernel's backing file, not the FUSE file, so RELEASE comes at
    close(2): the workspace keeps the staged file while the mapping holds it and commits
    it when the mapping goes (datahub/writeback/lingering.py)."""
    from tests.fuse.conftest import wait_until

    libc = _libc()
    data = os.urandom(MiB + 7)
    with _passthrough_mount(fuse_env) as (mnt, pid):
        log = fuse_env.root / "mount-ws.log"
        fd = os.open(mnt / "raw", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.ftruncate(fd, len(data))
        addr = libc.mmap(None, len(data), mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        assert _staged_files_of(pid)  # staged: the kernel maps the staged file itself
        os.close(fd)  # the last close: FLUSH, then RELEASE (handled asynchronously)
        # the daemon handled the RELEASE: it let the staged file go, or kept it for the mapping
        wait_until(lambda: not _staged_files_of(pid) or "after its last close" in log.read_text(), 10)
        ctypes.memmove(addr, data, len(data))
        assert libc.msync(addr, len(data), 4) == 0  # MS_SYNC
        assert libc.munmap(addr, len(data)) == 0
        wait_until(lambda: not _staged_files_of(pid), 10)  # committed and let go once unmapped
    assert _committed(fuse_env, "raw") == data


@pytest.mark.fuse
def test_stores_into_pages_dirtied_before_a_commit_are_committed_by_the_next_close(fuse_env) -> None:
    """A store into a mapped page that is already dirty and writable moves no timestamp, so
    the (size, mtime, ctime) check alone missed stores made after a commit into pages
    stored to before it: the close returned and the journal kept the older bytes."""
    libc = _libc()
    first, second = os.urandom(8192), os.urandom(8192)
    with _passthrough_mount(fuse_env) as (mnt, pid):
        fd = os.open(mnt / "pages", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.ftruncate(fd, len(first))
        addr = libc.mmap(None, len(first), mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        ctypes.memmove(addr, first, len(first))  # write faults: the pages are dirty and writable
        other = os.open(mnt / "pages", os.O_RDWR)
        os.close(other)  # FLUSH: commits ``first``
        assert _staged_files_of(pid)
        ctypes.memmove(addr, second, len(second))  # the same pages: no fault, no timestamp
        assert libc.munmap(addr, len(first)) == 0
        os.close(fd)  # FLUSH: must commit ``second`` before it returns
        assert (mnt / "pages").read_bytes() == second
    assert _committed(fuse_env, "pages") == second


@pytest.mark.fuse
def test_a_default_mount_keeps_stores_through_a_raw_mapping_after_the_last_close(fuse_env) -> None:
    """Through the daemon, the same C-style sequence as above (mmap, close, store, msync,
    munmap) reaches the workspace as WRITEs and is committed."""
    libc = _libc()
    data = os.urandom(MiB + 7)
    mnt = fuse_env.mountpoint("ws")
    with fuse_env.mounted(mnt, "--workspace", "ws") as proc:
        fd = os.open(mnt / "raw", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.ftruncate(fd, len(data))
        addr = libc.mmap(None, len(data), mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        os.close(fd)
        ctypes.memmove(addr, data, len(data))
        assert libc.msync(addr, len(data), 4) == 0  # MS_SYNC
        assert libc.munmap(addr, len(data)) == 0
    assert proc.returncode == 0
    assert _committed(fuse_env, "raw") == data


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
