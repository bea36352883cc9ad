"""A cold one-page file fetched whole at its OPEN, so that the kernel serves even its
first handle (issue 25 item 2): real mounts over moto, the project's libfuse 3.17 and this
kernel's passthrough.

The proof that the kernel serves a handle is behavioural, as in test_passthrough: its
``pread`` and ``mmap`` complete while the daemon is stopped (SIGSTOP), with the handle's
page cache dropped first. Every mapping is closed only after the daemon runs again: the
first ``close()`` on a fresh mount sends FUSE_FLUSH (Python's mmap closes a dup of the
descriptor), which the daemon answers ENOSYS once; that request is not a read, and it
is sent for warm passthrough handles just the same (docs/cache.md "A cold small file
fetched at OPEN").
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path

import pytest

from datahub.storage import StoreRegistry
from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, upload_dataset, wait_until
from tests.fuse.test_passthrough import (
    FILES,
    mount_after,
    mount_stats,
    page_file_of,
    page_files,
    read_while_stopped,
)

pytestmark = pytest.mark.fuse

GUARD = 60.0
LARGE = os.urandom(5 * 1024**2 + 11)  # more than one page (4 MiB): today's path


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "pt", {**FILES, "big/large.bin": LARGE})


def open_all(root: Path, keys) -> dict[int, bytes]:
    return {os.open(root / key, os.O_RDONLY): FILES[key] for key in keys}


def close_all(fds: dict[int, bytes]) -> None:
    for fd in fds:
        os.close(fd)


def test_a_cold_small_file_is_served_by_the_kernel_from_its_first_open(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("cold")
    with env.mounted(mnt, "pt", "--passthrough", "--no-prefetch") as proc:  # no warm-up: every open is cold
        root = mnt / "pt" / f"v{files.seq}"
        assert page_files(env) == []
        fds = open_all(root, FILES)  # the first opens of each file: nothing cached yet
        try:
            for data in FILES.values():
                page_file_of(env, data)  # fetched during OPEN
            got = read_while_stopped(proc, fds)
            assert got, "a read or mmap of a cold-opened handle waited for the stopped daemon"
            for fd, data in fds.items():
                assert got[fd] == (data, data)
        finally:
            close_all(fds)
        closed = time.time()  # a snapshot from before the opens shows no handle open either
        wait_until(lambda: mount_after(env, closed).get("passthrough_handles_open") == 0, GUARD)
        s = mount_stats(env)
        assert s["passthrough_opens_in_python"] == len(FILES) and s["ordinary_opens"] == 0
        assert (root / "big/large.bin").read_bytes() == LARGE  # more than a page: through the daemon
        wait_until(lambda: polled_mount(env).get("ordinary_opens") == 1, GUARD)


def test_a_cold_open_of_a_changed_object_fails_as_before(env: FuseEnv, files: Dataset) -> None:
    key = next(iter(FILES))
    with StoreRegistry(env.config) as stores:
        stores.store(f"s3://{env.bucket}/data").put(key, b"other bytes, another etag")
    for name, args in (("estale", ("--passthrough",)), ("estale-nopt", ("--no-passthrough",))):
        args = ("--no-prefetch", *args)  # the open is the first to ask for the object
        mnt = env.mountpoint(name)
        with env.mounted(mnt, "pt", *args):
            with pytest.raises(OSError) as exc:
                (mnt / "pt" / f"v{files.seq}" / key).read_bytes()
            assert exc.value.errno == errno.ESTALE, name
            other = list(FILES)[1]
            assert (mnt / "pt" / f"v{files.seq}" / other).read_bytes() == FILES[other]


def test_a_cold_opened_file_evicted_while_held_stays_valid(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("coldevict")
    with env.mounted(mnt, "pt", "--passthrough", "--no-prefetch"):
        root = mnt / "pt" / f"v{files.seq}"
        key, data = next(iter(FILES.items()))
        first = os.open(root / key, os.O_RDONLY)  # cold: fetched, then passthrough
        try:
            page_file_of(env, data).unlink()  # what eviction does
            assert os.pread(first, len(data) + 1, 0) == data
            with mmap.mmap(first, len(data), prot=mmap.PROT_READ) as m:
                assert m[:] == data
            second = os.open(root / key, os.O_RDONLY)  # the same backing file, checked again
            try:
                assert os.pread(second, len(data) + 1, 0) == data
            finally:
                os.close(second)
        finally:
            os.close(first)
        closed = time.time()
        wait_until(lambda: mount_after(env, closed).get("passthrough_handles_open") == 0, GUARD)
        assert mount_stats(env, cli=True)["passthrough_handles_open"] == 0  # as the CLI shows it
        assert (root / key).read_bytes() == data


@pytest.mark.parametrize("flag", ["--no-passthrough", "--no-cache"])
def test_without_passthrough_a_cold_open_takes_the_daemon_path(
    env: FuseEnv, files: Dataset, flag: str
) -> None:
    """The control: the same cold reads hang with the daemon stopped, as before."""
    mnt = env.mountpoint("off" + flag)
    with env.mounted(mnt, "pt", flag) as proc:
        root = mnt / "pt" / f"v{files.seq}"
        key = next(iter(FILES))
        fds = open_all(root, [key])
        try:
            assert read_while_stopped(proc, fds, wait=3.0, evicted=True) == {}
        finally:
            close_all(fds)
        assert {k: (root / k).read_bytes() for k in FILES} == FILES
        if flag == "--no-cache":
            assert page_files(env) == []


def test_concurrent_cold_opens_of_the_same_files_all_read_right(env: FuseEnv, files: Dataset) -> None:
    """Opens racing on one cold file each fetch through the single flight; one publishes
    its page file and the others take handles of that one (or read through the daemon)."""
    mnt = env.mountpoint("race")
    with env.mounted(mnt, "pt", "--passthrough", "--no-prefetch"):
        root = mnt / "pt" / f"v{files.seq}"
        keys = list(FILES)[:4]
        start = threading.Barrier(8)
        wrong: list[str] = []

        def reader(i: int) -> None:
            start.wait(timeout=GUARD)
            for key in keys[i % 2 :] + keys[: i % 2]:
                data = FILES[key]
                fd = os.open(root / key, os.O_RDONLY)
                try:
                    with mmap.mmap(fd, len(data), prot=mmap.PROT_READ) as m:
                        if os.pread(fd, len(data) + 1, 0) != data or m[:] != data:
                            wrong.append(key)
                finally:
                    os.close(fd)

        threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=GUARD)
        assert not any(t.is_alive() for t in threads) and wrong == []
        closed = time.time()
        wait_until(lambda: mount_after(env, closed).get("passthrough_handles_open") == 0, GUARD)
        s = mount_stats(env)
        assert s["passthrough_opens"] + s["ordinary_opens"] == 8 * len(keys)
        # an open that found the page in RAM while the disk file was still being written
        # was an ordinary one, and no file is published while such handles are open; the
        # next open of each file, with none open, is served by the kernel
        for key in keys:
            assert (root / key).read_bytes() == FILES[key]
        wait_until(lambda: polled_mount(env).get("published") == len(keys), GUARD)
