"""A workspace mount with the kernel's write-back cache (``--writeback-cache``, issue 41,
writes15): write(2) returns from the page cache and the kernel sends the dirty pages to the
daemon later, all of them before a close's FLUSH. What must still hold (docs/writeback.md,
"The kernel's write-back cache"): reads of a file being written see its bytes, O_APPEND
appends at the end the kernel knows, a shared mapping's stores are committed, close and
fsync are durable, and the mount really caches (fewer, larger WRITEs than write calls).
The quota, dup and kill -9 tests of the other files are parametrized over the option too.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys

import pytest

from tests.fuse.conftest import REPO, FuseEnv
from tests.fuse.fuse_tracepoint import FuseRequests, available
from tests.fuse.test_workspace_review11 import _kill_9, _remounted

pytestmark = pytest.mark.fuse
WBC = "--writeback-cache"


def test_the_option_is_refused_with_passthrough_and_on_read_only_mounts(env: FuseEnv) -> None:
    """The kernel turns passthrough off when the write-back cache is agreed (fs/fuse/inode.c,
    ``process_init_reply``), so the two are refused together, with a message, before mounting."""
    mnt = env.mountpoint("wbc-refused")
    for extra in (["--workspace", "ws", "--passthrough"], ["some-dataset"]):
        cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(env.config_path), "mount", str(mnt)]
        out = subprocess.run([*cmd, *extra, WBC], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert "--writeback-cache applies to --workspace mounts without --passthrough" in out.stderr
        assert "Traceback" not in out.stderr
    assert not os.listdir(mnt)


def test_reads_append_and_mappings_of_files_being_written(env: FuseEnv) -> None:
    mnt = env.mountpoint("wbc-posix")
    first, more = os.urandom(3 * 1024**2 + 5), os.urandom(70_001)
    with env.mounted(mnt, "--workspace", "wbc-posix", WBC):
        fd = os.open(mnt / "f.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, first)
        assert os.fstat(fd).st_size == len(first)
        assert (mnt / "f.bin").stat().st_size == len(first)  # a path stat while pages are dirty
        assert (mnt / "f.bin").read_bytes() == first  # another handle reads the unsent pages
        log = os.open(mnt / "log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        for line in (b"one\n", b"two\n"):
            os.write(log, line)
        os.close(log)
        log = os.open(mnt / "log", os.O_WRONLY | os.O_APPEND)
        os.write(log, b"three\n")
        os.close(log)
        os.write(fd, more)
        os.close(fd)
        with open(mnt / "map.bin", "wb") as fh:
            fh.write(b"\0" * 10_000)
        with open(mnt / "map.bin", "r+b") as fh, mmap.mmap(fh.fileno(), 10_000) as m:
            m[100:105] = b"hello"
            m.flush()
        assert (mnt / "f.bin").read_bytes() == first + more
        assert (mnt / "log").read_bytes() == b"one\ntwo\nthree\n"
    want = {
        "f.bin": first + more,
        "log": b"one\ntwo\nthree\n",
        "map.bin": b"\0" * 100 + b"hello" + b"\0" * 9895,
    }
    assert _remounted(env, mnt, "wbc-posix") == want


def test_closed_and_fsynced_files_survive_kill_9_and_unclosed_ones_are_absent(env: FuseEnv) -> None:
    """Dirty pages the kernel held when the daemon died were never acknowledged (the close or
    fsync that would have sent them had not returned): lost, and no such file comes back."""
    mnt = env.mountpoint("wbc-kill")
    closed, synced = os.urandom(5 * 1024**2 + 3), os.urandom(1_000_001)
    with env.mounted(mnt, "--workspace", "wbc-kill", WBC) as proc:
        (mnt / "closed.bin").write_bytes(closed)
        fd = os.open(mnt / "synced.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, synced)
        os.fsync(fd)
        open_fd = os.open(mnt / "open.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(open_fd, os.urandom(2_000_000))  # in the page cache only
        _kill_9(proc)
        for descriptor in (fd, open_fd):
            try:
                os.close(descriptor)
            except OSError:  # ENOTCONN: the connection is gone
                pass
        assert _remounted(env, mnt, "wbc-kill") == {"closed.bin": closed, "synced.bin": synced}


def test_small_writes_reach_the_daemon_as_few_large_writes(env: FuseEnv) -> None:
    """The option takes effect: 100 KB written in 4 KiB calls is one WRITE per file with the
    write-back cache, against one per call through the daemon without it."""
    why_not = available()
    if why_not is not None:
        pytest.skip(why_not)
    data = os.urandom(100_000)
    writes = {}
    for flags in ([], [WBC]):
        mnt = env.mountpoint(f"wbc-req{len(flags)}")
        with env.mounted(mnt, "--workspace", f"wbc-req{len(flags)}", *flags):
            with FuseRequests(mnt) as reqs:
                for i in range(5):
                    with open(mnt / f"f{i}", "wb", buffering=0) as fh:
                        for off in range(0, len(data), 4096):
                            fh.write(data[off : off + 4096])
            writes[bool(flags)] = reqs.counts()["FUSE_WRITE"] / 5
            assert all((mnt / f"f{i}").read_bytes() == data for i in range(5))
    assert writes == {False: 25, True: 1}


def test_umount_of_a_busy_mount_commits_what_a_holder_left_in_the_page_cache(env: FuseEnv) -> None:
    """``datahub umount`` of a mount a process still writes: the daemon closes its file
    durably, with the bytes the kernel still held dirty (``mount_sys.sync_mount`` before the
    daemon stops serving). The holder is its own process, opening the file itself: a dup of
    its descriptor closed by a fork of the test (a subprocess's exec) would flush the pages
    and hide the defect. Before: the file was committed with 0 bytes."""
    mnt = env.mountpoint("wbc-busy")
    data = b"written before umount" * 50_000
    script = (
        "import os, sys, time\n"
        f"fd = os.open({str(mnt / 'held.bin')!r}, os.O_CREAT | os.O_WRONLY, 0o644)\n"
        f"os.write(fd, {data[:21]!r} * 50_000)\n"
        "print('written', flush=True)\n"
        "sys.stdin.read()\n"
        "try:\n    os.close(fd)\nexcept OSError as exc:\n    print(exc.errno, flush=True)\n"
    )
    with env.mounted(mnt, "--workspace", "wbc-busy", WBC):
        holder = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "written\n"
            assert "stopped" in env.cli("umount", str(mnt)).stdout
        finally:
            holder.communicate("", timeout=60)
    assert _remounted(env, mnt, "wbc-busy") == {"held.bin": data}
