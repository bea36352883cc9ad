"""pyfuse3's C reader thread (third_party/pyfuse3/src/pyfuse3/fastloop.h) on real mounts.

The thread is the only reader of /dev/fuse: it answers OPEN of a published backing file,
RELEASE of its handles and the ``isatty()`` FUSE_IOCTL itself and hands every other
request to the trio loop. What must hold:
- opens it answers are counted (``passthrough_stats``) and read the right bytes;
- a published file changed on disk is caught by the thread (never its bytes to a reader);
- eviction retracts, and every backing id is closed by the unmount;
- the daemon exits cleanly when stopped (the thread waiting in poll()) or lazily unmounted
  with handles held (ENODEV once they close);
- many readers racing with files changed on disk end with right bytes and every id closed;
- a handle opened in C is closed without FUSE_FLUSH (answered with FOPEN_NOFLUSH).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuse_adapter.fuse_ops import FASTLOOP
from tests.fuse.conftest import Dataset, FuseEnv, is_mounted, polled_mount, upload_dataset, wait_until
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.fuse.test_passthrough import flip_byte, mount_stats, page_file_of, page_files

pytestmark = pytest.mark.fuse

GUARD = 60.0
FILES = {f"img/g{i:02d}.jpg": os.urandom(40_000 + 6113 * i) for i in range(10)}


def test_the_fastloop_build_is_installed() -> None:
    assert FASTLOOP, "pyfuse3 lacks fastloop.h (third_party/pyfuse3): run scripts/build_pyfuse3.sh"


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "fl", FILES)


def read_all(root: Path) -> None:
    for key, data in FILES.items():
        with open(root / key, "rb") as f:  # Python's open() sends the isatty() ioctl too
            assert f.read() == data


def publish_all(env: FuseEnv, root: Path) -> None:
    """Cold reads fill the disk tier; the next opens publish each file to the C table."""
    read_all(root)
    wait_until(lambda: len(page_files(env)) >= len(FILES), GUARD)
    read_all(root)
    wait_until(lambda: polled_mount(env).get("published", 0) == len(FILES), GUARD)


def ids_at_unmount(env: FuseEnv, name: str) -> tuple[int, int]:
    log = (env.root / f"mount-{name}.log").read_text()
    found = re.findall(r"unmounted: (\d+) backing ids opened, (\d+) closed", log)
    assert found, log[-2000:]
    opened, closed = map(int, found[-1])
    return opened, closed


def loop_thread_alive(pid: int) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == "pyfuse3-loop":
                return True
        except FileNotFoundError:  # a thread that ended since the listing (seen under load)
            continue
    return False


def test_opens_answered_by_the_loop_thread_are_counted_and_read_right(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("fl")
    with env.mounted(mnt, "fl", "--passthrough") as proc:
        wait_until(lambda: loop_thread_alive(proc.pid), GUARD)  # started by pyfuse3.main()
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        before = mount_stats(env)
        assert before["fastloop"] and before["mode"] == "passthrough"
        for _ in range(3):
            read_all(root)
        want = before["passthrough_opens_in_loop_thread"] + 3 * len(FILES)
        wait_until(lambda: polled_mount(env).get("passthrough_opens_in_loop_thread", 0) >= want, GUARD)
        wait_until(lambda: polled_mount(env).get("passthrough_handles_open") == 0, GUARD)
        after = mount_stats(env)
        assert after["passthrough_opens_in_python"] == before["passthrough_opens_in_python"]
        assert after["ordinary_opens"] == before["ordinary_opens"]
        assert after["releases_in_c"] >= before["releases_in_c"] + 3 * len(FILES)
        assert after["ioctls_in_loop_thread"] >= before["ioctls_in_loop_thread"] + 3 * len(FILES)
        assert after["backing_ids_open"] == after["published"] == len(FILES)
    opened, closed = ids_at_unmount(env, "fl")
    assert opened == closed >= len(FILES)


def test_no_fastloop_reads_requests_on_the_trio_loop(env: FuseEnv, files: Dataset) -> None:
    """The benchmark's baseline: the same C table, answered on the loop's thread."""
    mnt = env.mountpoint("nofl")
    with env.mounted(mnt, "fl", "--passthrough", "--no-fastloop") as proc:
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)  # served: pyfuse3.main() runs
        assert not loop_thread_alive(proc.pid)
        c_before = mount_stats(env)["passthrough_opens_in_c"]
        read_all(root)
        wait_until(lambda: polled_mount(env).get("passthrough_opens_in_c", 0) >= c_before + len(FILES), GUARD)
        s = mount_stats(env)
        assert not s["fastloop"] and s["passthrough_opens_in_loop_thread"] == 0
        assert s["ioctls_in_loop_thread"] == 0


def test_a_published_file_changed_on_disk_is_caught_by_the_loop_thread(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("fldmg")
    with env.mounted(mnt, "fl", "--passthrough"):
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        victims = list(FILES)[:3]
        flip_byte(page_file_of(env, FILES[victims[0]]), 123)
        os.truncate(page_file_of(env, FILES[victims[1]]), 999)
        os.utime(page_file_of(env, FILES[victims[2]]), ns=(1, 1))  # only its times move
        for key in victims:
            fd = os.open(root / key, os.O_RDONLY)
            try:
                assert os.pread(fd, len(FILES[key]) + 10, 0) == FILES[key]
            finally:
                os.close(fd)
        wait_until(lambda: polled_mount(env).get("changed_on_disk", 0) >= len(victims), GUARD)
        assert mount_stats(env, cli=True)["changed_on_disk"] >= len(victims)  # as the CLI shows it
        read_all(root)
    opened, closed = ids_at_unmount(env, "fldmg")
    assert opened == closed


def test_eviction_retracts_and_held_handles_stay_valid(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("flev")
    with env.mounted(mnt, "fl", "--passthrough"):
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        fds = {os.open(root / key, os.O_RDONLY): data for key, data in FILES.items()}  # the thread
        try:
            for path in page_files(env):
                path.unlink()  # what eviction does
            for fd, data in fds.items():
                assert os.pread(fd, len(data) + 1, 0) == data
        finally:
            for fd in fds:
                os.close(fd)
        read_all(root)  # each open finds its file unlinked: retracted, read through the daemon
        wait_until(lambda: polled_mount(env).get("passthrough_handles_open") == 0, GUARD)
        wait_until(lambda: polled_mount(env).get("backing_ids_open") == polled_mount(env)["published"], GUARD)
    opened, closed = ids_at_unmount(env, "flev")
    assert opened == closed >= len(FILES)


#: where the C threads take requests from: io_uring queues (the default where the kernel
#: offers them; the daemon, root, turns the offer on) or /dev/fuse
TRANSPORTS = {"io_uring": ("--passthrough",), "dev-fuse": ("--passthrough", "--no-io-uring")}


def uses(env: FuseEnv, transport: str) -> None:
    want = "io_uring" if transport == "io_uring" else "/dev/fuse"
    assert mount_stats(env)["requests"].startswith(want), mount_stats(env)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_stop_signal_with_handles_held_exits_cleanly(env: FuseEnv, files: Dataset, transport: str) -> None:
    mnt = env.mountpoint("flterm")
    with env.mounted(mnt, "fl", *TRANSPORTS[transport]) as proc:
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        uses(env, transport)
        fds = [os.open(root / key, os.O_RDONLY) for key in FILES]  # answered by the C threads
        try:
            proc.send_signal(signal.SIGTERM)  # the thread waits in poll(): terminate() stops it
            assert proc.wait(timeout=GUARD) == 0
        finally:
            for fd in fds:
                os.close(fd)
        wait_until(lambda: not is_mounted(str(mnt)), GUARD)
    opened, closed = ids_at_unmount(env, "flterm")
    assert opened == closed >= len(FILES)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_lazy_unmount_with_handles_held_ends_the_loop_when_they_close(
    env: FuseEnv, files: Dataset, transport: str
) -> None:
    """The handles keep the connection (and read right); their close ends it: ENODEV reaches
    the thread's read, and the end of the session is handed to the trio loop, which returns
    from pyfuse3.main() as it does on libfuse's own read (and stops the io_uring threads)."""
    mnt = env.mountpoint("fllazy")
    with env.mounted(mnt, "fl", *TRANSPORTS[transport]) as proc:
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        uses(env, transport)
        fds = {os.open(root / key, os.O_RDONLY): data for key, data in FILES.items()}
        try:
            subprocess.run(["fusermount3", "-uz", str(mnt)], check=True, timeout=GUARD)
            assert proc.poll() is None
            for fd, data in fds.items():
                assert os.pread(fd, len(data) + 1, 0) == data
        finally:
            for fd in fds:
                os.close(fd)
        assert proc.wait(timeout=GUARD) == 0
    opened, closed = ids_at_unmount(env, "fllazy")
    assert opened == closed >= len(FILES)


@pytest.fixture
def stress_mount(env: FuseEnv, files: Dataset):
    mnt = env.mountpoint("flstress")
    with env.mounted(mnt, "fl", "--passthrough"):
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        yield root
    opened, closed = ids_at_unmount(env, "flstress")
    assert opened == closed >= len(FILES)


KEYS = sorted(FILES)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(["touch", "chmod", "flip"]), st.integers(0, len(KEYS) - 1)),
        min_size=1,
        max_size=8,
    ),
    seed=st.integers(0, 2**16),
)
def test_readers_racing_with_changed_files_read_right_bytes(
    env: FuseEnv, stress_mount: Path, changes: list[tuple[str, int]], seed: int
) -> None:
    """8 threads open, read and close while published files change on disk (the thread
    retracts them, Python checks them again and publishes them anew): every read of a
    handle opened after a change is right, and the unmount closes every backing id
    (checked by the fixture).

    What passthrough does not promise, by design (docs/cache.md, "Backing files"): a handle
    opened BEFORE its file's bytes were changed in place reads what the file then holds,
    because the kernel serves it from the file and the check is at each open. So a wrong
    read is allowed only when its open began before a flip of that file ended and the read
    ended after that flip began; anything else (a wrong read after the flip, or after a
    touch or chmod, which change no byte) fails the test."""
    root = stress_mount
    rng = random.Random(seed)
    wrong: list[tuple[str, float, float]] = []  # key, open began, read ended
    flips: dict[str, list[tuple[float, float]]] = {}  # key -> (flip began, flip ended)
    stop = threading.Event()

    def reader(n: int) -> None:
        order = [rng.choice(KEYS) for _ in range(60)]
        for key in order:
            if stop.is_set():
                return
            began = time.monotonic()
            with open(root / key, "rb") as f:
                ok = f.read() == FILES[key]
            if not ok:
                wrong.append((key, began, time.monotonic()))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        for what, i in changes:
            try:
                path = page_file_of(env, FILES[KEYS[i]])
            except AssertionError:
                continue  # already changed (a flip) or being fetched again
            if what == "touch":
                os.utime(path)
            elif what == "chmod":
                os.chmod(path, 0o600)
            else:
                began = time.monotonic()
                flip_byte(path, rng.randrange(len(FILES[KEYS[i]])))
                flips.setdefault(KEYS[i], []).append((began, time.monotonic()))
    finally:
        for t in threads:
            t.join(timeout=GUARD)
        stop.set()
    unexplained = [
        (key, opened, ended)
        for key, opened, ended in wrong
        if not any(opened <= f_end and ended >= f_began for f_began, f_end in flips.get(key, []))
    ]
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert unexplained == [], (unexplained, flips)
    read_all(root)


#: every C path that answers an OPEN: the io_uring queue threads and the /dev/fuse thread
#: share one answer (fastloop.h), the trio loop's thread another (fuse_open, fastopen.h)
C_OPENS = {"io_uring": ("--passthrough",), "trio-loop": ("--passthrough", "--no-fastloop")}


@pytest.mark.parametrize("path", sorted(C_OPENS))
def test_a_handle_opened_in_c_closes_without_a_flush(env: FuseEnv, files: Dataset, path: str) -> None:
    """A read-only passthrough handle has nothing to flush: its OPEN is answered with
    FOPEN_NOFLUSH, so its close() skips fuse_flush (and the FUSE_FLUSH a fresh mount sends
    until the daemon answered ENOSYS once). The first close on this mount is the one traced:
    the handle that published the file (answered in Python) stays open meanwhile."""
    mnt = env.mountpoint("flnf")
    key, data = next(iter(FILES.items()))
    with env.mounted(mnt, "fl", *C_OPENS[path]):
        root = mnt / "fl" / f"v{files.seq}"
        first = os.open(root / key, os.O_RDONLY)  # cold: fetched at OPEN and published
        try:
            wait_until(lambda: polled_mount(env).get("published", 0) == 1, GUARD)
            with FuseRequests(mnt, name=f"datahub-test-{os.getpid()}") as req:
                fd = os.open(root / key, os.O_RDONLY)  # answered in C
                try:
                    assert os.pread(fd, len(data) + 1, 0) == data
                finally:
                    os.close(fd)
                wait_until(lambda: polled_mount(env).get("passthrough_handles_open") == 1, GUARD)
            counts = req.counts()
            assert counts.get("FUSE_OPEN") == 1 and counts.get("FUSE_RELEASE") == 1, counts
            assert "FUSE_FLUSH" not in counts, counts
            wait_until(lambda: polled_mount(env).get("passthrough_opens_in_c", 0) >= 1, GUARD)
        finally:
            os.close(first)


@pytest.mark.exclusive  # drop_caches: every file system's dentries and inodes
def test_forgets_of_a_read_only_mount_are_dropped_by_the_loop_thread(env: FuseEnv, files: Dataset) -> None:
    """A read-only mount's FORGET is a no-op (its inodes live as long as the mount, and its
    LOOKUPs are answered in C): after the kernel dropped its dentries and inodes, the
    FORGETs it sends never reach the trio loop, and every file reads right again (LOOKUPs
    answered in C, opens by the C threads)."""
    mnt = env.mountpoint("flfg")
    with env.mounted(mnt, "fl", "--passthrough"):
        root = mnt / "fl" / f"v{files.seq}"
        publish_all(env, root)
        before = mount_stats(env)
        Path("/proc/sys/vm/drop_caches").write_text("2\n")  # dentries and inodes: FORGETs
        wait_until(lambda: polled_mount(env).get("forgets_in_loop_thread", 0) > 0, GUARD)
        read_all(root)
        after = mount_stats(env)
        assert after["forgets_in_loop_thread"] > before["forgets_in_loop_thread"]
