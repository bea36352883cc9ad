"""FUSE requests over io_uring, one queue per CPU (third_party/pyfuse3/src/pyfuse3/uring.h), on real mounts.

A read-only mount run as root turns the kernel's offer on (``fuse.enable_uring``) and its
INIT reply takes it; one C thread per CPU, pinned there, then answers OPEN of published
files, their RELEASE and ``isatty()`` itself and hands the rest to the trio loop. What must
hold:
- requests come from the queues (counted), from readers on every CPU, and read right;
- a published file changed on disk is caught by a queue thread;
- Python's answers (LOOKUP, cold opens, READ) go back through the entry they came from,
  also with more requests in flight than a queue has entries;
- a stop signal or a lazy unmount with handles held ends cleanly, every backing id closed
  (tests/fuse/test_fastloop.py, over both io_uring and /dev/fuse);
- ``--no-io-uring``, and a kernel that does not offer it at INIT, keep /dev/fuse.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fuse_adapter.fuse_ops import URING
from fuse_adapter.uring import PARAM
from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, upload_dataset, wait_until
from tests.fuse.test_fastloop import FILES, ids_at_unmount, publish_all, read_all
from tests.fuse.test_passthrough import flip_byte, mount_stats, page_file_of

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(
        not PARAM.exists(), reason="the kernel has no FUSE over io_uring (CONFIG_FUSE_IO_URING)"
    ),
]

GUARD = 60.0


def possible_cpus() -> int:
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    return max(int(part.split("-")[-1]) for part in text.split(",")) + 1


def ring_threads(pid: int) -> dict[str, str]:
    """{thread name: its allowed CPUs} of the daemon's queue threads."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        if name.startswith("pyfuse3-ring"):
            status = (task / "status").read_text()
            found[name] = next(
                line.split()[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list")
            )
    return found


def run_all(readers: list[threading.Thread]) -> None:
    for t in readers:
        t.start()
    for t in readers:
        t.join(GUARD)
    assert not any(t.is_alive() for t in readers), "a reader hung"


def test_the_uring_build_is_installed() -> None:
    assert URING, "pyfuse3 lacks uring.h (third_party/pyfuse3): run scripts/build_pyfuse3.sh"


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "ur", FILES)


def test_requests_come_from_one_pinned_queue_per_cpu_and_read_right(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("ur")
    with env.mounted(mnt, "ur", "--passthrough") as proc:
        root = mnt / "ur" / f"v{files.seq}"
        publish_all(env, root)
        s = mount_stats(env)
        n = possible_cpus()
        assert s["requests"] == f"io_uring ({n} queues)" and s["io_uring_queues"] == n, s
        assert PARAM.read_text().strip() == "Y"  # turned on by the daemon (root)
        threads = ring_threads(proc.pid)
        assert sorted(threads) == sorted(f"pyfuse3-ring{i}" for i in range(n))
        online = os.sched_getaffinity(0)
        for i in range(n):
            if i in online:
                assert threads[f"pyfuse3-ring{i}"] == str(i)  # pinned to its CPU
        before = mount_stats(env)
        assert before["io_uring_handed_to_python"] > 0  # LOOKUP, the cold opens and their READs

        def read_on(cpu: int, errors: list) -> None:
            try:
                os.sched_setaffinity(0, {cpu})  # this thread only
                for _ in range(3):
                    read_all(root)
            except Exception as exc:
                errors.append((cpu, exc))

        errors: list = []
        run_all([threading.Thread(target=read_on, args=(cpu, errors)) for cpu in sorted(online)])
        assert errors == []
        opens = 3 * len(FILES) * len(online)
        # each open: OPEN, the isatty() ioctl and RELEASE, all answered by the queue threads
        want = before["io_uring_answered_in_c"] + 3 * opens
        wait_until(lambda: polled_mount(env)["io_uring_answered_in_c"] >= want, GUARD)  # a newer snapshot
        wait_until(lambda: polled_mount(env)["passthrough_handles_open"] == 0, GUARD)
        after = mount_stats(env)
        assert after["passthrough_opens_in_loop_thread"] >= before["passthrough_opens_in_loop_thread"] + opens
        assert after["passthrough_opens_in_python"] == before["passthrough_opens_in_python"]
    opened, closed = ids_at_unmount(env, "ur")
    assert opened == closed >= len(FILES)


def test_a_published_file_changed_on_disk_is_caught_by_a_queue_thread(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("urdmg")
    with env.mounted(mnt, "ur", "--passthrough"):
        root = mnt / "ur" / f"v{files.seq}"
        publish_all(env, root)
        assert mount_stats(env)["io_uring_queues"] > 0
        victims = list(FILES)[:2]
        flip_byte(page_file_of(env, FILES[victims[0]]), 77)
        os.truncate(page_file_of(env, FILES[victims[1]]), 500)
        for key in victims:
            assert (root / key).read_bytes() == FILES[key]
        wait_until(lambda: polled_mount(env).get("changed_on_disk", 0) >= len(victims), GUARD)
        read_all(root)
    opened, closed = ids_at_unmount(env, "urdmg")
    assert opened == closed


def test_more_cold_requests_in_flight_than_a_queue_has_entries(env: FuseEnv) -> None:
    """48 readers of cold files on one CPU: a queue has 16 entries, so the kernel holds the
    rest until Python's answers (through the entries they came from) free one."""
    many = {f"c/f{i:03d}.bin": os.urandom(20_000 + 97 * i) for i in range(96)}
    ds = upload_dataset(env, "urcold", many)
    mnt = env.mountpoint("urcold")
    with env.mounted(mnt, "urcold", "--passthrough"):
        root = mnt / "urcold" / f"v{ds.seq}"
        keys = sorted(many)
        wrong: list[str] = []

        def reader(part: list[str]) -> None:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
            for key in part:
                if (root / key).read_bytes() != many[key]:
                    wrong.append(key)

        run_all([threading.Thread(target=reader, args=(keys[i::48],)) for i in range(48)])
        assert wrong == []
        wait_until(lambda: polled_mount(env).get("io_uring_handed_to_python", 0) >= len(many), GUARD)
        assert mount_stats(env)["io_uring_queues"] > 0


def test_no_io_uring_keeps_dev_fuse(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("urno")
    with env.mounted(mnt, "ur", "--passthrough", "--no-io-uring") as proc:
        root = mnt / "ur" / f"v{files.seq}"
        publish_all(env, root)
        read_all(root)
        s = mount_stats(env)
        assert s["requests"] == "/dev/fuse (--no-io-uring)" and s["io_uring_queues"] == 0
        assert s["io_uring_requests"] == 0 and not ring_threads(proc.pid)
        wait_until(
            lambda: polled_mount(env)["passthrough_opens_in_loop_thread"] > 0, GUARD
        )  # /dev/fuse's C thread
        assert mount_stats(env, cli=True)["passthrough_opens_in_loop_thread"] > 0  # as the CLI shows it


@pytest.mark.exclusive  # turns the kernel's offer off: a mount started meanwhile would not get io_uring
def test_a_kernel_that_does_not_offer_it_at_init_keeps_dev_fuse(
    env: FuseEnv, files: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon asks (its parameter file reads on), the kernel's is off: INIT carries no
    offer, pyfuse3 starts no queue, and every reply still reaches the device."""
    fake = tmp_path / "enable_uring"
    fake.write_text("Y\n")
    monkeypatch.setenv("DATAHUB_FUSE_URING_PARAM", str(fake))
    was = PARAM.read_text().strip()
    PARAM.write_text("N")
    try:
        mnt = env.mountpoint("urinit")
        with env.mounted(mnt, "ur", "--passthrough") as proc:
            root = mnt / "ur" / f"v{files.seq}"
            publish_all(env, root)
            read_all(root)
            s = mount_stats(env)
            assert s["requests"] == "/dev/fuse (the kernel did not take io_uring at INIT)", s
            assert s["io_uring_queues"] == 0 and not ring_threads(proc.pid)
            wait_until(lambda: polled_mount(env)["passthrough_opens_in_loop_thread"] > 0, GUARD)
    finally:
        PARAM.write_text(was)
