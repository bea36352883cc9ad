"""The automatic read mode (``--auto-read-mode``) on real mounts, with the kernel's fuse
tracepoint: passthrough while opens find their page files out of the page cache (an SSD-tier
hit sends no READ), then, once they find them all in, one switch to zero-message opens (a
warm buffered pass sends nothing, a default ``open()`` one FUSE_IOCTL). Handles opened in
passthrough before the switch keep reading right bytes after it, and a page file changed in
place, before or after the switch, is never served (promise 2).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, upload_dataset, wait_until
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.fuse.test_fastread import forget_pages, read_buffered, read_py
from tests.fuse.test_passthrough import FILES, GUARD, flip_byte, mount_stats, page_file_of, warm_into_disk
from tests.fuse.ticks import short_ticks
from tests.pagecache import pinned_in_page_cache, resident_pages

pytestmark = pytest.mark.fuse


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(short_ticks(env), "am", FILES)


def page_files_by_key(env: FuseEnv) -> dict[str, Path]:
    return {key: page_file_of(env, data) for key, data in FILES.items()}


def drop_page_files(pages: dict[str, Path]) -> None:
    """Out of the page cache: the next open of each file is an SSD-tier hit."""
    os.sync()  # dirty pages cannot be dropped
    forget_pages(Path("/"), pages.values())
    assert all(resident_pages(p) == 0 for p in pages.values())


def switched(env: FuseEnv, root: Path, keys: list[str] | None = None, threads: int = 1) -> None:
    """Warm passes over ``keys`` (all files) with ``threads`` readers, without a pause, until
    the mount says it switched: each open finds its page file in the page cache; every byte is
    checked, so a reader that gets an error or wrong bytes mid-switch fails the test."""
    keys = list(FILES) if keys is None else keys
    stop = threading.Event()
    passes = [0]

    def read_on() -> None:
        with ThreadPoolExecutor(threads) as pool:
            while not stop.is_set():
                got = list(pool.map(lambda key: read_buffered(root / key), keys))
                assert got == [FILES[key] for key in keys]
                passes[0] += 1

    with ThreadPoolExecutor(1) as runner:
        reading = runner.submit(read_on)
        try:
            wait_until(
                lambda: reading.done() or mount_stats(env).get("read_mode") == "auto: zero-message",
                GUARD,
                interval=0.3,
            )
            time.sleep(0.5)  # and on after it
        finally:
            stop.set()
        reading.result()  # a reader's error or wrong bytes, raised here
    assert mount_stats(env)["read_mode"] == "auto: zero-message"


def test_a_default_mount_chooses_automatically_and_is_in_cache_stats_once_mounted(
    env: FuseEnv, files: Dataset
) -> None:
    """No read-mode flag: the automatic mode, in passthrough until its opens find the working
    set in the page cache. And the mount is in ``datahub cache stats`` the moment it is
    mounted: its row is written as it reports, before it serves, not at its cache's first
    maintenance round (2 s on), when a poll right after the mount found no row."""
    mnt = env.mountpoint("amnew")
    with env.mounted(mnt, "am", "--no-prefetch") as proc:
        row = polled_mount(env)  # at once, before any maintenance round
        assert row.get("pid") == proc.pid and row.get("mountpoint") == str(mnt), row
        assert row["read_mode"] == "auto: passthrough"
        assert mount_stats(env, cli=True)["mountpoint"] == str(mnt)  # as `datahub cache stats` shows it


def test_ssd_tier_hits_stay_in_passthrough_and_send_no_read(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("amssd")
    with env.mounted(mnt, "am", "--auto-read-mode"):
        root = mnt / "am" / f"v{files.seq}"
        warm_into_disk(env, root)
        pages = page_files_by_key(env)
        for _ in range(4):  # more sampled opens than the switch needs, every one cold
            drop_page_files(pages)
            with FuseRequests(mnt) as req:
                assert {key: read_buffered(root / key) for key in FILES} == FILES
            counts = req.counts()
            assert not counts["FUSE_READ"], counts
            assert counts["FUSE_OPEN"] == len(FILES), counts
        # the decision's ticks took every pass's opens in (the row shows the counters of its last tick)
        wait_until(lambda: mount_stats(env).get("read_mode_opens_sampled", 0) >= 3 * len(FILES), GUARD)
        s = mount_stats(env)
        assert s["read_mode"] == "auto: passthrough", s
        assert s["read_mode_opens_sampled"] >= 3 * len(FILES) and s["read_mode_opens_resident"] == 0, s


def test_a_warm_working_set_switches_to_zero_message_opens(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("amwarm")
    with env.mounted(mnt, "am", "--auto-read-mode"):
        root = mnt / "am" / f"v{files.seq}"
        warm_into_disk(env, root)
        pages = page_files_by_key(env)
        switched(env, root, threads=8)  # 8 readers across the switch: no error, no wrong byte
        s = mount_stats(env)
        assert s["mode"].startswith("off: zero-message") and s["reads_in_c"] == "on", s
        assert s["read_mode_page_files_carried"] == len(FILES), s
        forget_pages(root, FILES)  # (files read after the switch are in the mount's cache)
        with FuseRequests(mnt) as first:  # the first epoch after: a READ per file, in C
            assert {key: read_buffered(root / key) for key in FILES} == FILES
        wait_until(lambda: not mount_stats(env).get("read_mode_first_epoch_after_switch", True), GUARD)
        for key in FILES:  # the bytes once in RAM: the mount's pages, not the page file's
            assert resident_pages(pages[key]) == 0, key
            assert resident_pages(root / key) > 0, key
        counts = first.counts()
        assert not counts["FUSE_OPEN"] and not counts["FUSE_RELEASE"], counts
        assert counts["FUSE_READ"] >= len(FILES), counts
        wait_until(lambda: mount_stats(env).get("reads_answered_in_c", 0) >= len(FILES), GUARD)
        paths = [root / key for key in FILES]
        with pinned_in_page_cache(paths):
            time.sleep(0.2)
            with FuseRequests(mnt) as buffered:
                assert {key: read_buffered(root / key) for key in FILES} == FILES
            with FuseRequests(mnt) as plain:
                assert {key: read_py(root / key) for key in FILES} == FILES
    assert buffered.counts() == {}, buffered.counts()
    sent = plain.counts()
    assert set(sent) <= {"FUSE_IOCTL"} and sent["FUSE_IOCTL"] <= len(FILES), sent


def test_passthrough_handles_held_open_never_fail_a_reader_and_hold_the_switch(
    env: FuseEnv, files: Dataset
) -> None:
    """This kernel fails with EIO an open it makes itself (no_open) of an inode with a
    passthrough handle open: the switch waits for them to close, or is given up."""
    mnt = env.mountpoint("amheld")
    with env.mounted(mnt, "am", "--auto-read-mode"):
        root = mnt / "am" / f"v{files.seq}"
        warm_into_disk(env, root)
        held = {key: os.open(root / key, os.O_RDONLY) for key in list(FILES)[:3]}  # passthrough handles
        try:

            def given_up() -> bool:  # warm passes: decided, drained in vain, given up
                assert {key: read_buffered(root / key) for key in FILES} == FILES
                for key, fd in held.items():
                    assert os.pread(fd, len(FILES[key]) + 1, 0) == FILES[key], key
                # no row yet: the mount writes its first stats snapshot at its cache's first maintenance round
                return mount_stats(env).get("read_mode_switches_given_up", 0) >= 1

            wait_until(given_up, GUARD, interval=0.3)
            assert mount_stats(env)["read_mode"] != "auto: zero-message"
        finally:
            for fd in held.values():
                os.close(fd)
        switched(env, root)  # the handles closed: the next decision switches
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES


def test_a_page_file_changed_in_place_is_never_served_across_the_switch(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("amdmg")
    with env.mounted(mnt, "am", "--auto-read-mode"):
        root = mnt / "am" / f"v{files.seq}"
        warm_into_disk(env, root)
        assert {key: read_buffered(root / key) for key in FILES} == FILES  # published for passthrough
        keys = list(FILES)
        before, after = keys[:3], keys[3:6]
        for i, key in enumerate(before):  # changed while published for passthrough, not opened again
            flip_byte(page_file_of(env, FILES[key]), 997 * i + 13)
        switched(env, root, keys[3:])  # the changed files are not handed to the READ table
        assert mount_stats(env)["read_mode_page_files_carried"] == len(FILES) - len(before)
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES
        wait_until(lambda: mount_stats(env)["reads_answered_in_c"] > 0, GUARD)
        for i, key in enumerate(after):  # changed while published for READs in C
            flip_byte(page_file_of(env, FILES[key]), 1009 * i + 29)
        forget_pages(root, FILES)
        for key in before + after:
            assert read_buffered(root / key) == FILES[key], key
        wait_until(lambda: mount_stats(env)["page_files_changed"] >= len(after), GUARD)
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES


def test_a_new_daemon_starts_in_passthrough_and_decides_again(env: FuseEnv, files: Dataset) -> None:
    """A restart is a new FUSE connection: the kernel asks OPEN again (``no_open`` was the old
    connection's), so the mount starts in passthrough over the warm page files and switches
    again from what its opens find."""
    mnt = env.mountpoint("amre")
    with env.mounted(mnt, "am", "--auto-read-mode"):
        root = mnt / "am" / f"v{files.seq}"
        warm_into_disk(env, root)
        switched(env, root)
    with env.mounted(mnt, "am", "--auto-read-mode") as proc:
        wait_until(lambda: mount_stats(env).get("pid") == proc.pid, GUARD)
        assert mount_stats(env)["read_mode"] == "auto: passthrough"
        with FuseRequests(mnt) as req:
            assert {key: read_buffered(root / key) for key in FILES} == FILES
        assert req.counts()["FUSE_OPEN"] == len(FILES), req.counts()
        switched(env, root)
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES
