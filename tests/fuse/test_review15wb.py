"""review15wb: adversarial tests of the kernel's write-back cache on workspace mounts
(``--writeback-cache``, writes15; docs/writeback.md, "The kernel's write-back cache").

The promise under attack: close() and fsync() return only when the bytes are durable in the
shared tier and journaled, a kill -9 of the daemon loses no acknowledged file, and reads of
a file being written see its bytes. Each test drives a real mount the way an application
would (mappings, descriptors shared across processes, O_APPEND, truncates of dirty files,
renames, O_DIRECT, several writers past a quota, ``datahub umount`` under a writer) and then
checks what a fresh mount of the workspace holds after a kill -9, where the acknowledged
state is all that may be left.

That fresh mount is made inside the killed mount's ``with`` block, over the dead daemon's
stale mount point: ``datahub mount`` detaches it and the new daemon replays the journal, as
a remount after a crash does (CSI). Made after the block, the block's teardown first ran a
``datahub umount`` whose recovery replayed and flushed the journal in a process of its own
(~1.2 CPU-s a test), so the fresh mount found a recovered workspace instead of a crashed one.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_review11 import _kill_9, _remounted

pytestmark = pytest.mark.fuse
WBC = "--writeback-cache"
MiB = 1024**2


def _child(script: str, *fds: int) -> subprocess.CompletedProcess:
    """Run ``script`` in another Python process (given ``fds``); fails the test if it fails."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        pass_fds=fds,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out


class _Reader:
    """Another process that opens, reads and closes a file when asked (spawned before the
    writer opens it: a process started later would get a copy of the writer's descriptor,
    whose close-on-exec sends a FLUSH of it and so writes the pages back itself)."""

    SCRIPT = """
        import os, sys, hashlib
        for line in sys.stdin:
            path = line.strip()
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                print(os.stat(path).st_size, len(data), hashlib.sha256(data).hexdigest(), flush=True)
            except OSError as exc:
                print("error", exc.errno, "-", flush=True)
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(self.SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def read(self, path: Path) -> tuple[int, int, str]:
        """(stat size, bytes read, their sha256) as the other process saw them."""
        size, n, digest = self.attempt(path)
        assert size != "error", f"the reader got errno {n} for {path}"
        return int(size), int(n), digest

    def attempt(self, path: Path) -> list[str]:
        """The other process's answer: size, bytes read and sha256, or "error", errno, "-"."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().split()

    def close(self) -> None:
        self.proc.communicate("", timeout=60)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_shared_mappings_msynced_after_close_or_unmapped_before_it_survive_kill_9(env: FuseEnv) -> None:
    """A store through a MAP_SHARED mapping is acknowledged by msync(MS_SYNC), also after the
    descriptor was closed (the mapping keeps the file open: the FSYNC carries its handle), and
    by the close that follows a munmap (the close writes the dirty pages back first)."""
    mnt = env.mountpoint("rv-map")
    size = 3 * MiB + 100
    after, unmapped = os.urandom(size), os.urandom(size)
    with env.mounted(mnt, "--workspace", "rv-map", WBC) as proc:
        (mnt / "after.bin").write_bytes(b"\0" * size)
        fd = os.open(mnt / "after.bin", os.O_RDWR)
        m = mmap.mmap(fd, size)
        os.close(fd)  # its FLUSH committed the zeros; the mapping still holds the file
        m[:] = after
        m.flush()  # msync(MS_SYNC): acknowledged
        fd = os.open(mnt / "unmapped.bin", os.O_CREAT | os.O_RDWR, 0o644)
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as m2:
            m2[:] = unmapped
        os.close(fd)  # acknowledged: every dirty page of the mapping went before the FLUSH
        _kill_9(proc)
        try:
            m.close()
        except OSError:
            pass
        assert _remounted(env, mnt, "rv-map") == {"after.bin": after, "unmapped.bin": unmapped}


def test_a_file_written_by_two_processes_is_acknowledged_by_either_close(env: FuseEnv) -> None:
    """One open file description shared with a child (the descriptor passed on): the child's
    close commits every dirty page of the file, the parent's too, before it returns; bytes
    written after it are not acknowledged. Two opens of one file: the close of one commits
    what the other wrote before it, while the other goes on writing."""
    mnt = env.mountpoint("rv-fork")
    first, second, later = os.urandom(MiB + 1), bytes(range(256)) * 8193, os.urandom(MiB)
    a, b, c = os.urandom(700_001), os.urandom(600_003), os.urandom(500_000)
    with env.mounted(mnt, "--workspace", "rv-fork", WBC) as proc:
        fd = os.open(mnt / "shared.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, first)  # in the parent's page cache only
        _child(
            f"import os; os.write({fd}, bytes(range(256)) * 8193); os.close({fd})", fd
        )  # acks first+second
        os.write(fd, later)  # never acknowledged: the daemon dies before any close of it
        one = os.open(mnt / "two.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        two = os.open(mnt / "two.bin", os.O_WRONLY)
        os.pwrite(one, a, 0)
        os.pwrite(two, b, len(a))
        os.close(one)  # acknowledges a + b
        os.pwrite(two, c, len(a) + len(b))
        _kill_9(proc)
        for descriptor in (fd, two):
            with pytest.raises(OSError):
                os.close(descriptor)  # the daemon died with its pages dirty: no close succeeds
        assert _remounted(env, mnt, "rv-fork") == {"shared.bin": first + second, "two.bin": a + b}


def test_appends_from_two_processes_keep_every_record_whole(env: FuseEnv) -> None:
    mnt = env.mountpoint("rv-append")
    script = """
        import os, sys
        tag = sys.argv[1].encode()
        fd = os.open(sys.argv[2], os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        for i in range(400):
            line = tag + b"%05d" % i + b"." * 90 + b"\\n"
            assert os.write(fd, line) == len(line)
        os.close(fd)
    """
    with env.mounted(mnt, "--workspace", "rv-append", WBC) as proc:
        path = str(mnt / "log")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(script), tag, path], stderr=subprocess.PIPE
            )
            for tag in ("A", "B")
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        seen = (mnt / "log").read_bytes()
        _kill_9(proc)
        lines = _remounted(env, mnt, "rv-append")["log"]
        assert lines == seen
        want = {t + b"%05d" % i + b"." * 90 for t in (b"A", b"B") for i in range(400)}
        assert len(lines.splitlines()) == 800 and set(lines.splitlines()) == want


def test_truncates_of_a_file_with_dirty_pages(env: FuseEnv) -> None:
    """ftruncate and truncate by path while the kernel still holds written pages: the sizes
    stat sees, and the bytes committed at close, are those of the same calls on a local file."""
    mnt = env.mountpoint("rv-trunc")
    data = os.urandom(2 * MiB + 5)
    want = {}
    with env.mounted(mnt, "--workspace", "rv-trunc", WBC) as proc:
        fd = os.open(mnt / "cut.bin", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, data)
        os.ftruncate(fd, 1000)
        assert os.fstat(fd).st_size == 1000 and (mnt / "cut.bin").stat().st_size == 1000
        os.pwrite(fd, b"tail", 5000)
        assert os.pread(fd, 6000, 0) == data[:1000] + bytes(4000) + b"tail"
        os.close(fd)
        want["cut.bin"] = data[:1000] + bytes(4000) + b"tail"

        fd = os.open(mnt / "bypath.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.truncate(mnt / "bypath.bin", 3000)  # no file handle in the SETATTR
        assert (mnt / "bypath.bin").stat().st_size == 3000
        os.write(fd, b"more")  # at the descriptor's offset, past the new end: a hole
        os.close(fd)
        want["bypath.bin"] = data[:3000] + bytes(len(data) - 3000) + b"more"

        fd = os.open(mnt / "grown.bin", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, data[:100])
        os.ftruncate(fd, MiB)
        os.pwrite(fd, b"x", 10)
        os.close(fd)
        want["grown.bin"] = data[:10] + b"x" + data[11:100] + bytes(MiB - 100)
        got = {name: (mnt / name).read_bytes() for name in want}
        _kill_9(proc)
        assert got == want
        assert _remounted(env, mnt, "rv-trunc") == want


def test_renamed_and_unlinked_dirty_files(env: FuseEnv) -> None:
    mnt = env.mountpoint("rv-rename")
    a, b, c = os.urandom(MiB + 7), os.urandom(300_000), os.urandom(400_000)
    with env.mounted(mnt, "--workspace", "rv-rename", WBC) as proc:
        (mnt / "old.bin").write_bytes(b"replaced")
        fd = os.open(mnt / "a.tmp", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, a)
        os.rename(mnt / "a.tmp", mnt / "a.bin")
        os.close(fd)
        fd = os.open(mnt / "b.tmp", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b)
        os.rename(mnt / "b.tmp", mnt / "old.bin")  # replaces a closed file
        os.fsync(fd)
        fd2 = os.open(mnt / "gone.bin", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd2, c)
        os.unlink(mnt / "gone.bin")
        assert os.pread(fd2, len(c), 0) == c  # an unlinked file still reads its bytes
        os.close(fd2)
        _kill_9(proc)
        with pytest.raises(OSError):
            os.close(fd)
        assert _remounted(env, mnt, "rv-rename") == {"a.bin": a, "old.bin": b}


def test_a_reader_in_another_process_sees_whole_bytes_and_sizes_while_it_is_written(env: FuseEnv) -> None:
    mnt = env.mountpoint("rv-reader")
    block = 64 * 1024
    data = os.urandom(64 * block)
    with env.mounted(mnt, "--workspace", "rv-reader", WBC):
        reader = _Reader()
        try:
            path = mnt / "grow.bin"
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            for i in range(0, len(data), block):
                os.write(fd, data[i : i + block])
                if i % (8 * block) == 0:
                    assert reader.read(path) == (i + block, i + block, _sha(data[: i + block]))
            os.close(fd)
            assert reader.read(path) == (len(data), len(data), _sha(data))
        finally:
            reader.close()
    assert _remounted(env, mnt, "rv-reader") == {"grow.bin": data}


def test_sync_and_a_directory_fsync_acknowledge_nothing_half_written(env: FuseEnv) -> None:
    """``sync`` and fsync of the directory send the dirty pages (WRITEs) but commit no file:
    a file never closed nor fsynced is absent after a kill -9, a closed one whole."""
    mnt = env.mountpoint("rv-sync")
    done = os.urandom(MiB)
    with env.mounted(mnt, "--workspace", "rv-sync", WBC) as proc:
        (mnt / "done.bin").write_bytes(done)
        fd = os.open(mnt / "open.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, os.urandom(MiB))
        dfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)
        os.close(dfd)
        os.sync()
        _kill_9(proc)
        with pytest.raises(OSError):
            os.fsync(fd)
        with pytest.raises(OSError):
            os.close(fd)
        assert _remounted(env, mnt, "rv-sync") == {"done.bin": done}


def _aligned(data: bytes) -> mmap.mmap:
    buf = mmap.mmap(-1, len(data))  # page-aligned, as O_DIRECT wants
    buf[:] = data
    return buf


def test_o_direct_reads_and_writes_on_the_mount(env: FuseEnv) -> None:
    """O_DIRECT beside buffered writers: a direct read sees the bytes a buffered writer left in
    the page cache, a buffered read sees a direct write, and both are committed at close."""
    mnt = env.mountpoint("rv-direct")
    buffered, direct = os.urandom(MiB), os.urandom(MiB)
    with env.mounted(mnt, "--workspace", "rv-direct", WBC) as proc:
        w = os.open(mnt / "f.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(w, buffered)
        d = os.open(mnt / "f.bin", os.O_RDWR | os.O_DIRECT)
        out = mmap.mmap(-1, MiB)
        assert os.preadv(d, [out], 0) == MiB and out[:] == buffered
        assert os.pwritev(d, [_aligned(direct)], MiB) == MiB
        assert (mnt / "f.bin").read_bytes() == buffered + direct
        os.close(d)
        os.close(w)
        _kill_9(proc)
        assert _remounted(env, mnt, "rv-direct") == {"f.bin": buffered + direct}


QUOTA = 3 * MiB


def _close_errno(fd: int) -> int:
    try:
        os.close(fd)
    except OSError as exc:
        return exc.errno
    return 0


def test_several_writers_past_the_quota_and_a_rewrite_after_an_enospc_close(env: FuseEnv) -> None:
    """Three processes write 2 MiB each under a 3 MiB quota: each close is 0 with its file
    whole, or ENOSPC with its new file absent; then the same names written again within the
    quota that is left close with 0 and hold their bytes."""
    mnt = env.mountpoint("rv-quota")
    script = """
        import os, sys
        data = bytes([int(sys.argv[2])]) * (2 * 1024 ** 2)
        fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
        for i in range(0, len(data), 65536):
            os.write(fd, data[i : i + 65536])
        try:
            os.close(fd)
        except OSError as exc:
            print(exc.errno)
        else:
            print(0)
    """
    with env.mounted(mnt, "--workspace", "rv-quota", "--quota", str(QUOTA), WBC) as proc:
        procs = {
            n: subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(script), str(mnt / f"w{n}.bin"), str(n)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in (1, 2, 3)
        }
        closes = {}
        for n, p in procs.items():
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            closes[n] = int(out)
        assert set(closes.values()) <= {0, errno.ENOSPC} and errno.ENOSPC in closes.values()
        want = {f"w{n}.bin": bytes([n]) * 2 * MiB for n, rc in closes.items() if rc == 0}
        assert {p.name: p.read_bytes() for p in mnt.iterdir()} == want
        for n, rc in closes.items():
            if rc:
                small = bytes([n + 10]) * 100_000
                fd = os.open(mnt / f"w{n}.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                os.write(fd, small)
                assert _close_errno(fd) == 0
                want[f"w{n}.bin"] = small
        assert {p.name: p.read_bytes() for p in mnt.iterdir()} == want
        _kill_9(proc)
        assert _remounted(env, mnt, "rv-quota") == want


def test_o_direct_write_past_the_quota_is_refused_or_reads_back(env: FuseEnv) -> None:
    """An O_DIRECT write reaches the daemon inside write(2), not from the page cache: it must
    fail with ENOSPC there, or the bytes it reported written must read back; the refused
    WRITE makes the close report ENOSPC. Before (review15wb): a 3 MiB quota, a 4 MiB O_DIRECT
    pwritev of a new file returned 4194304, and a direct pread of it returned zeros from
    offset 3145728 on (the WRITE past the quota answered as done, its bytes dropped, as for
    the page cache's WRITEs: the daemon could not tell them apart)."""
    mnt = env.mountpoint("rv-dquota")
    data = os.urandom(4 * MiB)
    with env.mounted(mnt, "--workspace", "rv-dquota", "--quota", str(QUOTA), WBC):
        fd = os.open(mnt / "d.bin", os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
        try:
            try:
                n = os.pwritev(fd, [_aligned(data)], 0)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                n = 0
            out = mmap.mmap(-1, len(data))
            got = os.preadv(fd, [out], 0)
            assert n < len(data) and got >= n and out[:n] == data[:n]
        finally:
            closed = _close_errno(fd)
        assert closed == errno.ENOSPC


def test_a_readers_close_does_not_commit_a_file_whose_writes_ran_out_of_space(env: FuseEnv) -> None:
    """A writer's pages past the quota are dropped when another process's open writes them
    back (``_short_file``): that reader's close must not commit the half-written file, nor
    may the close of a handle opened since, so the writer's ENOSPC close leaves the new file
    absent, as its message says (nothing half-written is committed). Before: the reader's
    close committed the file with the dropped range missing and it stayed."""
    mnt = env.mountpoint("rv-reader-q")
    data = os.urandom(2 * QUOTA)
    with env.mounted(mnt, "--workspace", "rv-reader-q", "--quota", str(QUOTA), WBC) as proc:
        reader = _Reader()
        try:
            fd = os.open(mnt / "big.bin", os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, data)  # the page cache holds it; the WRITEs come at the reader's open
            # what it reads past the quota is the daemon's (the open drops the page cache): not
            # checked here, only that its close commits nothing (docs/writeback.md)
            assert reader.read(mnt / "big.bin")[0] == len(data)
        finally:
            reader.close()
        late = os.open(mnt / "big.bin", os.O_WRONLY)  # opened after the drop: refused as the others
        assert _close_errno(late) == errno.ENOSPC
        assert _close_errno(fd) == errno.ENOSPC
        left = {p.name: p.read_bytes() for p in mnt.iterdir()}
        _kill_9(proc)
        assert left == {}
        assert _remounted(env, mnt, "rv-reader-q") == {}


def test_umount_while_a_writer_keeps_writing_commits_a_whole_prefix(env: FuseEnv) -> None:
    """``datahub umount`` (syncfs, then the stop) while a process writes in a loop: the file the
    daemon commits for it holds a prefix of what it wrote, byte-exact, never a hole."""
    mnt = env.mountpoint("rv-umount")
    script = """
        import os, sys
        fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
        block = bytes(range(256)) * 256
        print("started", flush=True)
        n = 0
        try:
            while n < 4000:
                os.write(fd, block)
                n += 1
        except OSError as exc:
            print("write", exc.errno, flush=True)
        try:
            os.close(fd)
        except OSError as exc:
            print("close", exc.errno, flush=True)
    """
    block = bytes(range(256)) * 256
    with env.mounted(mnt, "--workspace", "rv-umount", WBC):
        writer = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), str(mnt / "stream.bin")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None and writer.stdout.readline() == "started\n"
        env.cli("umount", str(mnt))
        writer.communicate(timeout=120)
    files = _remounted(env, mnt, "rv-umount")
    got = files.get("stream.bin", b"")
    assert got == (block * 4000)[: len(got)]


def _errno_of_call(fn, *args) -> int:
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno
    return 0


@pytest.mark.parametrize("retry", ["fsync", "close", "reader"])
def test_a_failed_write_back_is_never_acknowledged_by_a_later_fsync_or_close(
    env: FuseEnv, retry: str
) -> None:
    """A page the kernel wrote back in a WRITE that failed (the chunk it falls into could not
    be read from the shared tier, which was out of reach for a moment: here its directory
    moved away) is clean in the page cache and never sent again. The fsync that sent it
    fails; a later fsync or close of the same descriptor, once the shared tier is back, must
    not return 0 unless the page is durable (docs/writeback.md: "a retry may succeed").
    ``reader``: another process's open and close of the file write the page back instead,
    and that close may take the kernel's one report of the error; the writer's close after
    it must not return 0 unless the page is durable."""
    mnt = env.mountpoint("rv-eio")
    shared = env.root / "var" / "cache" / "shared" / "writeback" / "rv-eio"
    old, page = os.urandom(3 * MiB), os.urandom(4096)
    with env.mounted(mnt, "--workspace", "rv-eio", WBC):
        (mnt / "f.bin").write_bytes(old)
    with env.mounted(mnt, "--workspace", "rv-eio", WBC) as proc:  # nothing of f.bin in its RAM
        reader = _Reader()
        fd = os.open(mnt / "f.bin", os.O_WRONLY)
        os.pwrite(fd, page, 4096)  # a whole page: no READ of it first, the page cache only
        shared.rename(shared.with_name("away"))
        try:
            if retry == "reader":
                first = int(reader.attempt(mnt / "f.bin")[0] == "error")
            else:
                first = _errno_of_call(os.fsync, fd)
        finally:
            shared.with_name("away").rename(shared)
            reader.close()
        second = _errno_of_call(os.fsync if retry == "fsync" else os.close, fd)
        _kill_9(proc)
        if retry == "fsync":
            _errno_of_call(os.close, fd)
        got = _remounted(env, mnt, "rv-eio")["f.bin"]
        assert first != 0
        if second == 0:  # acknowledged: the page must be there
            assert got[4096:8192] == page
        else:
            assert got == old


def test_a_mapping_cannot_pass_the_quota_and_its_msync_is_acknowledged(env: FuseEnv) -> None:
    """A shared mapping only stores within the file's size, which the kernel asks the daemon
    for (SETATTR, synchronous also with the write-back cache): a grow past the quota fails at
    the ftruncate itself, and stores within the size it allows are acknowledged by msync,
    after a kill -9 too."""
    mnt = env.mountpoint("rv-mapq")
    acked = os.urandom(MiB)
    with env.mounted(mnt, "--workspace", "rv-mapq", "--quota", str(QUOTA), WBC) as proc:
        (mnt / "m.bin").write_bytes(acked)
        fd = os.open(mnt / "m.bin", os.O_RDWR)
        with pytest.raises(OSError) as exc:
            os.ftruncate(fd, 2 * QUOTA)
        assert exc.value.errno == errno.ENOSPC and os.fstat(fd).st_size == MiB
        os.ftruncate(fd, 2 * MiB)
        stores = os.urandom(2 * MiB)
        with mmap.mmap(fd, 2 * MiB) as m:
            m[:] = stores
            m.flush()  # msync(MS_SYNC): acknowledged
        _kill_9(proc)
        _close_errno(fd)
        assert _remounted(env, mnt, "rv-mapq") == {"m.bin": stores}


def test_the_same_name_written_again_while_a_short_handle_of_the_old_file_is_open(env: FuseEnv) -> None:
    """Two opens of a new file, one writes past the quota: its close reverts (the file goes);
    the name is created and written again while the other handle is still open; that
    handle's close is refused too, leaves the new file alone, and the quota counts only the
    new file (a second refund of the old one would let later writes past the limit)."""
    mnt = env.mountpoint("rv-again")
    new = os.urandom(MiB)
    with env.mounted(mnt, "--workspace", "rv-again", "--quota", str(QUOTA), WBC) as proc:
        a = os.open(mnt / "x.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        b = os.open(mnt / "x.bin", os.O_WRONLY)
        os.write(a, os.urandom(QUOTA + MiB))
        assert _close_errno(a) == errno.ENOSPC
        assert not (mnt / "x.bin").exists()
        c = os.open(mnt / "x.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(c, new)
        assert _close_errno(c) == 0
        assert _close_errno(b) == errno.ENOSPC
        assert (mnt / "x.bin").read_bytes() == new
        fill = os.urandom(QUOTA - MiB - 4096)  # what the quota has left, nearly
        (mnt / "fill.bin").write_bytes(fill)
        over = os.open(mnt / "over.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(over, os.urandom(MiB))
        assert _close_errno(over) == errno.ENOSPC  # past the quota: refused
        _kill_9(proc)
        assert _remounted(env, mnt, "rv-again") == {"x.bin": new, "fill.bin": fill}
