"""FUSE passthrough: a file whose object is wholly in the disk tier is served by the kernel.

The proofs are behavioural, with a real mount, the project's libfuse 3.17 and this
kernel's passthrough:
- reads (and mmap) of a handle opened after the object reached the disk tier complete
  while the daemon is stopped (SIGSTOP), with the handle's page cache dropped first: an
  ordinary handle would send READ to the stopped daemon;
- a page file damaged on disk, while mounted (after it was verified and handed to the
  kernel once) or while unmounted, never reaches a reader: the open takes the ordinary
  path, which fetches the object again;
- ``datahub cache stats`` shows the mode and counts passthrough opens.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from datahub.cache.stats import read_snapshots, stats_dir
from datahub.cli.main import main
from fuse_adapter.fuse_ops import FASTOPEN, PASSTHROUGH
from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, polled_stats, upload_dataset, wait_until
from tests.pagecache import resident_pages_of
from tests.servers import REPO

pytestmark = pytest.mark.fuse

GUARD = 60.0
FILES = {f"img/f{i:02d}.jpg": os.urandom(50_000 + 7919 * i) for i in range(12)}


def test_the_passthrough_build_is_installed() -> None:
    assert PASSTHROUGH, "pyfuse3 lacks passthrough.h / libfuse 3.17: run scripts/install.sh"
    assert FASTOPEN, "pyfuse3 lacks fastopen.h (third_party/pyfuse3): run scripts/build_pyfuse3.sh"


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "pt", FILES)


def page_files(env: FuseEnv) -> list[Path]:
    return sorted(env.root.rglob("*.page"))


def page_file_of(env: FuseEnv, data: bytes) -> Path:
    """The disk tier's file holding ``data`` (format 3: the file is the object's bytes)."""
    for path in page_files(env):
        try:
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                return path
        except FileNotFoundError:
            continue  # removed since the listing (a damaged file the daemon rejected, an eviction)
    raise AssertionError("no page file holds these bytes")


def cache_stats(env: FuseEnv, *, cli: bool = False) -> dict:
    """``datahub --json cache stats`` (the mounts' snapshots): the command's own function
    (``datahub.cli.main.main``, parser and handler) run in this process, or with ``cli=True``
    a real CLI run, which the tests ask for where they check what the CLI shows.

    Why not always a process: each is ~0.6-1 CPU-s of imports for the same output, and the
    tests' polls (``wait_until``) started one after another until a counter moved
    (docs/benchmarks.md, "suite29"); ``warmup`` in tests/fuse/test_bucket_warmup.py does the same."""
    args = ["--config", str(env.config_path), "--json", "cache", "stats"]
    if not cli:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(args)
        assert code == 0, f"cache stats exited {code}: {out.getvalue()}"
        return json.loads(out.getvalue())
    cmd = [sys.executable, "-m", "datahub.cli.main", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True, cwd=REPO).stdout
    return json.loads(out)


def mount_stats(env: FuseEnv, *, cli: bool = False) -> dict:
    """The last mount's row of ``cache_stats`` (``cli``: a real CLI run)."""
    mounts = cache_stats(env, cli=cli)["mounts"]
    return mounts[-1] if mounts else {}


def mount_after(env: FuseEnv, since: float) -> dict:
    """The last mount's row of a stats snapshot the daemon took after ``since`` (``time.time()``
    in this process), else {}: for polls of a state the mount was in before the action too
    (no passthrough handle open): a mount writes its first snapshot as it starts, so an older
    snapshot would end the wait before the counters asserted next moved."""
    rows = [
        row
        for s in read_snapshots(stats_dir(env.config))
        if s.get("time", 0.0) > since
        for row in s.get("mounts", [])
    ]
    return rows[-1] if rows else {}


def warm_into_disk(env: FuseEnv, root: Path) -> None:
    for key, data in FILES.items():  # cold: through the daemon, written to the disk tier
        assert (root / key).read_bytes() == data
    wait_until(lambda: len(page_files(env)) >= len(FILES), GUARD)


def read_while_stopped(
    proc, fds: dict[int, bytes], wait: float = 30.0, evicted: bool = False
) -> dict[int, tuple[bytes, bytes]]:
    """Read each open fd whole (read and mmap) with the daemon stopped; {} if that hung.

    ``wait``: how long the reads may take while the daemon is stopped (a generous guard
    where they must finish; where they must hang, a few seconds show it). The mappings are
    closed after the daemon runs again: Python's mmap closes a dup of the fd, and the first
    close() on a fresh mount sends FUSE_FLUSH until the daemon has answered ENOSYS once.

    ``evicted``: the control's premise, checked once the daemon is stopped: none of the
    files' pages is cached, so every byte needs the daemon. Checked before the stop, a READ
    the daemon was still answering (the kernel's readahead of an earlier read, on a loaded
    machine) put pages back after the check and the control's reads found them cached."""
    got: dict[int, tuple[bytes, bytes]] = {}
    maps: list[mmap.mmap] = []

    def read_all() -> None:
        for fd, data in fds.items():
            plain = os.pread(fd, len(data) + 1, 0)
            m = mmap.mmap(fd, len(data), prot=mmap.PROT_READ)
            maps.append(m)
            got[fd] = (plain, m[:])

    os.kill(proc.pid, signal.SIGSTOP)
    try:
        evict(fds, evicted)
        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        reader.join(timeout=wait)
        finished = not reader.is_alive()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    reader.join(timeout=GUARD)
    for m in maps:
        m.close()
    return got if finished else {}


def evict(fds: dict[int, bytes], check: bool) -> None:
    """Drop the files' cached pages: an ordinary handle then needs READ requests for every
    byte. With ``check``, until none is resident (a page an eviction cannot take yet, e.g.
    held in another CPU's LRU batch, would be read from the cache and make a control pass
    for the wrong reason)."""
    for _ in range(50 if check else 1):
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if not check or all(resident_pages_of(fd, len(data)) == 0 for fd, data in fds.items()):
            return
        time.sleep(0.1)
    raise AssertionError("the files' pages could not be evicted")


def assert_read_while_stopped(proc, root: Path) -> None:
    """Every file of FILES under ``root`` opened, then read whole (read and mmap) with the
    daemon stopped: each must come back right, none may wait for the daemon."""
    fds = {os.open(root / key, os.O_RDONLY): data for key, data in FILES.items()}
    try:
        got = read_while_stopped(proc, fds)
        assert got, "a read of a passthrough handle waited for the stopped daemon"
        for fd, data in fds.items():
            assert got[fd] == (data, data)
    finally:
        for fd in fds:
            os.close(fd)


def test_reads_and_mmap_of_disk_tier_files_never_reach_the_daemon(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("pt")
    with env.mounted(mnt, "pt", "--passthrough") as proc:
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        assert_read_while_stopped(proc, root)
        wait_until(
            lambda: polled_mount(env).get("passthrough_opens", 0) >= len(FILES), GUARD
        )  # snapshots lag
        assert mount_stats(env)["mode"] == "passthrough"
        wait_until(lambda: polled_mount(env).get("passthrough_handles_open") == 0, GUARD)
        s = mount_stats(env)  # ids are held for published files only (opens answered in C)
        assert s["backing_ids_open"] == s["published"] <= len(FILES)


def test_no_passthrough_keeps_reads_in_the_daemon(env: FuseEnv, files: Dataset) -> None:
    """The control for the test above: the same reads hang without passthrough."""
    mnt = env.mountpoint("nopt")
    with env.mounted(mnt, "pt", "--no-passthrough") as proc:
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        key = next(iter(FILES))
        fd = os.open(root / key, os.O_RDONLY)
        try:
            assert read_while_stopped(proc, {fd: FILES[key]}, wait=3.0, evicted=True) == {}
        finally:
            os.close(fd)
        wait_until(lambda: polled_mount(env).get("mode") == "off: zero-message opens", GUARD)
        assert mount_stats(env, cli=True)["mode"] == "off: zero-message opens"  # as the CLI shows it


def flip_byte(path: Path, at: int) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def test_a_backing_file_damaged_while_mounted_is_never_served(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("dmg")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        for key, data in FILES.items():  # verified and handed to the kernel once
            assert (root / key).read_bytes() == data
        wait_until(lambda: polled_mount(env).get("passthrough_opens", 0) >= len(FILES), GUARD)
        victims = list(FILES)[:4]
        for i, key in enumerate(victims):
            flip_byte(page_file_of(env, FILES[key]), 1000 * i + 17)
        for key in victims:
            assert (root / key).read_bytes() == FILES[key]
            with open(root / key, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                assert m[:] == FILES[key]
        wait_until(
            lambda: sum(b["rejected"] for b in polled_stats(env)["backing_files"]) >= len(victims), GUARD
        )
        shown = cache_stats(env, cli=True)["backing_files"]  # as the CLI shows it
        assert sum(b["rejected"] for b in shown) >= len(victims)


def test_a_backing_file_damaged_while_unmounted_is_never_served(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("dmg2")
    with env.mounted(mnt, "pt", "--passthrough"):
        warm_into_disk(env, mnt / "pt" / f"v{files.seq}")
    victims = list(FILES)[-3:]
    flip_byte(page_file_of(env, FILES[victims[0]]), 5)
    with open(page_file_of(env, FILES[victims[1]]), "ab") as f:  # a longer file
        f.write(b"tail")
    path = page_file_of(env, FILES[victims[2]])
    os.truncate(path, 100)
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        for key, data in FILES.items():
            assert (root / key).read_bytes() == data
        for key in victims:  # fetched again: the next opens are passthrough again
            fd = os.open(root / key, os.O_RDONLY)
            try:
                assert os.pread(fd, len(FILES[key]) + 10, 0) == FILES[key]
            finally:
                os.close(fd)


def test_an_evicted_backing_file_stays_valid_for_the_handles_that_hold_it(
    env: FuseEnv, files: Dataset
) -> None:
    mnt = env.mountpoint("evict")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        key, data = next(iter(FILES.items()))
        first = os.open(root / key, os.O_RDONLY)  # passthrough: holds the page file's inode
        try:
            page_file_of(env, data).unlink()  # what eviction does
            assert os.pread(first, len(data) + 1, 0) == data
            second = os.open(root / key, os.O_RDONLY)  # same inode: the same backing file
            try:
                assert os.pread(second, len(data) + 1, 0) == data
                with mmap.mmap(second, len(data), prot=mmap.PROT_READ) as m:
                    assert m[:] == data
            finally:
                os.close(second)
        finally:
            os.close(first)
        closed = time.time()
        wait_until(lambda: mount_after(env, closed).get("passthrough_handles_open") == 0, GUARD)
        assert mount_stats(env, cli=True)["passthrough_handles_open"] == 0  # as the CLI shows it
        assert (root / key).read_bytes() == data  # the file is gone: through the daemon (RAM or origin)


# --- opens answered in C (third_party/pyfuse3/src/pyfuse3/fastopen.h) ----------------------
def read_all(root: Path) -> None:
    for key, data in FILES.items():
        assert (root / key).read_bytes() == data


def test_opens_of_published_files_never_reach_python(env: FuseEnv, files: Dataset) -> None:
    """After one open published each file, further opens and releases are answered in C:
    the count of passthrough opens Python answered stays flat while C's grows."""
    mnt = env.mountpoint("fast")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        read_all(root)  # the first passthrough opens: in Python, which publishes each file
        wait_until(lambda: polled_mount(env).get("published", 0) == len(FILES), GUARD)
        before = mount_stats(env)
        for _ in range(3):
            read_all(root)
        want = before["passthrough_opens_in_c"] + 3 * len(FILES)
        wait_until(lambda: polled_mount(env).get("passthrough_opens_in_c", 0) >= want, GUARD)
        wait_until(lambda: polled_mount(env).get("passthrough_handles_open") == 0, GUARD)
        after = mount_stats(env)
        assert after["passthrough_opens_in_python"] == before["passthrough_opens_in_python"]
        assert after["ordinary_opens"] == before["ordinary_opens"]
        assert after["releases_in_c"] >= before["releases_in_c"] + 3 * len(FILES)
        assert after["backing_ids_open"] == after["published"] == len(FILES)


def test_no_fastopen_answers_the_same_opens_in_python(env: FuseEnv, files: Dataset) -> None:
    """The benchmark's baseline: the same passthrough, every open answered by Python."""
    mnt = env.mountpoint("slow")
    with env.mounted(mnt, "pt", "--passthrough", "--no-fastopen"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        read_all(root)
        read_all(root)
        wait_until(lambda: polled_mount(env).get("passthrough_opens_in_python", 0) >= 2 * len(FILES), GUARD)
        s = mount_stats(env)
        assert s["passthrough_opens_in_c"] == 0 and s["releases_in_c"] == 0 and not s["fastopen"]


def test_a_published_file_damaged_on_disk_is_caught_by_c_at_the_next_open(
    env: FuseEnv, files: Dataset
) -> None:
    mnt = env.mountpoint("fastdmg")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        read_all(root)
        read_all(root)  # answered in C: the files are published
        wait_until(lambda: polled_mount(env).get("passthrough_opens_in_c", 0) >= len(FILES), GUARD)
        victims = list(FILES)[:3]
        flip_byte(page_file_of(env, FILES[victims[0]]), 99)
        os.truncate(page_file_of(env, FILES[victims[1]]), 1000)
        os.chmod(page_file_of(env, FILES[victims[2]]), 0o600)  # only its ctime moves: checked again
        for key in victims:
            fd = os.open(root / key, os.O_RDONLY)
            try:
                assert os.pread(fd, len(FILES[key]) + 10, 0) == FILES[key]
                with mmap.mmap(fd, len(FILES[key]), prot=mmap.PROT_READ) as m:
                    assert m[:] == FILES[key]
            finally:
                os.close(fd)
        wait_until(lambda: polled_mount(env).get("changed_on_disk", 0) >= len(victims), GUARD)
        wait_until(lambda: sum(b["rejected"] for b in polled_stats(env)["backing_files"]) >= 2, GUARD)
        shown = cache_stats(env, cli=True)["backing_files"]  # as the CLI shows it
        assert sum(b["rejected"] for b in shown) >= 2
        read_all(root)


def test_opens_with_write_flags_are_refused_on_a_published_file(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("fastrw")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        read_all(root)
        wait_until(lambda: polled_mount(env).get("published", 0) == len(FILES), GUARD)
        assert mount_stats(env, cli=True)["published"] == len(FILES)  # as the CLI shows it
        key, data = next(iter(FILES.items()))
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_RDONLY | os.O_TRUNC):
            with pytest.raises(OSError) as exc:
                os.close(os.open(root / key, flags))
            assert exc.value.errno == errno.EROFS, flags
        assert (root / key).read_bytes() == data


def test_backing_ids_are_all_released_after_eviction_and_at_unmount(env: FuseEnv, files: Dataset) -> None:
    """Handles answered in C stay valid when their page files are evicted; the ids of
    evicted files go with their last handle, and every id is closed at unmount."""
    mnt = env.mountpoint("fastevict")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        read_all(root)
        wait_until(lambda: polled_mount(env).get("published", 0) == len(FILES), GUARD)
        fds = {os.open(root / key, os.O_RDONLY): data for key, data in FILES.items()}  # in C
        try:
            for path in page_files(env):
                path.unlink()  # what eviction does
            for fd, data in fds.items():
                assert os.pread(fd, len(data) + 1, 0) == data
            key, data = next(iter(FILES.items()))
            again = os.open(root / key, os.O_RDONLY)  # C sees the unlink: Python checks it again
            try:
                with mmap.mmap(again, len(data), prot=mmap.PROT_READ) as m:
                    assert m[:] == data
            finally:
                os.close(again)
        finally:
            for fd in fds:
                os.close(fd)
        read_all(root)  # each open sees its file unlinked: retracted, read through the daemon
        wait_until(lambda: polled_mount(env).get("passthrough_handles_open") == 0, GUARD)
        wait_until(lambda: polled_mount(env).get("backing_ids_open") == 0, GUARD)
    log = (env.root / "mount-fastevict.log").read_text()
    opened, closed = map(int, re.findall(r"unmounted: (\d+) backing ids opened, (\d+) closed", log)[-1])
    assert opened == closed >= len(FILES)


def disk_hits(env: FuseEnv, stats=cache_stats) -> int:
    return sum(t.get("hits", 0) for t in stats(env)["tiers"] if t["tier"] == "disk")


def test_opens_answered_in_c_count_as_disk_tier_hits(env: FuseEnv, files: Dataset) -> None:
    """Eviction must see published files in use although their opens never reach Python."""
    mnt = env.mountpoint("fasthits")
    with env.mounted(mnt, "pt", "--passthrough"):
        root = mnt / "pt" / f"v{files.seq}"
        warm_into_disk(env, root)
        read_all(root)
        wait_until(lambda: polled_mount(env).get("published", 0) == len(FILES), GUARD)
        before = disk_hits(env)
        c_before = mount_stats(env)["passthrough_opens_in_c"]
        read_all(root)
        wait_until(lambda: polled_mount(env).get("passthrough_opens_in_c", 0) >= c_before + len(FILES), GUARD)
        wait_until(lambda: disk_hits(env, polled_stats) >= before + len(FILES), GUARD)
        shown = disk_hits(env, lambda e: cache_stats(e, cli=True))  # as the CLI shows it
        assert shown >= before + len(FILES)
