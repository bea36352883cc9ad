"""A page file published to pyfuse3's C tables and removed by *another process* sharing the
disk directory (its tier evicted it: docs/cache.md, "Processes sharing a cache directory")
is let go within seconds even if nothing opens or reads it again: the mount's once-a-second
sweep (``passthrough_sweep`` / ``fastread_sweep``) fstat()s a slice of each table's held
descriptors and retracts the files that changed, so their disk space comes back.

Before the sweep, C saw such a file only at its inode's next OPEN (passthrough) or READ
(zero-message opens); a file nothing opened again, or a warm file whose pages the kernel
keeps (a warm epoch sends no READ), stayed open in the daemon, its space in use and counted
by no tier, until unmount: up to 4,096 page files per table. The mount's own evictions were
already retracted at once (tests/fuse/test_evicted_published.py). Here the other process's
eviction is its effect on the file, an unlink (the index entry is that process's business).

The daemon sweeps 2,048 slots a tick instead of 512 (tests/fuse/fast_sweep_mount.py): the
same sweep going round the table a slice a tick, a full table in 4 ticks instead of 16.
"""

from __future__ import annotations

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.fuse.fast_sweep_mount import SLOTS
from tests.fuse.test_evicted_published import _published, _removed_page_files_held
from tests.fuse.test_fastread import forget_pages, read_buffered
from tests.fuse.test_passthrough import FILES, GUARD, page_files, warm_into_disk
from tests.fuse.ticks import short_ticks

pytestmark = pytest.mark.fuse

LET_GO = (
    45.0  # seconds: the sweep covers a full table (8,192 slots) in 4 ticks (tests.fuse.ticks); slack for load
)
SWEEPER = "tests.fuse.fast_sweep_mount"  # the mount daemon with SWEEP_SLOTS raised to SLOTS


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(short_ticks(env), "el", FILES)


@pytest.mark.parametrize(
    ("args", "key", "swept"),
    [
        (("--no-passthrough",), "page_files_published", "page_files_swept"),
        (("--passthrough",), "published", "backing_files_swept"),
    ],
    ids=["fastread", "passthrough"],
)
def test_a_published_page_file_removed_by_another_process_is_let_go(
    env: FuseEnv, files: Dataset, args: tuple[str, ...], key: str, swept: str
) -> None:
    mnt = env.mountpoint("el")
    with env.mounted(mnt, "el", *args, module=SWEEPER) as daemon:
        assert f"looks at {SLOTS} slots a tick" in (env.root / "mount-el.log").read_text()  # it took
        root = mnt / "el" / f"v{files.seq}"
        warm_into_disk(env, root)

        def all_published() -> bool:  # the first READ (or OPEN) of a disk-tier file publishes it
            forget_pages(root, FILES)
            assert {k: read_buffered(root / k) for k in FILES} == FILES
            return _published(env, key) == len(FILES)

        wait_until(all_published, GUARD, interval=0.5)
        assert {k: read_buffered(root / k) for k in FILES} == FILES  # warm: no request needed
        removed = page_files(env)
        assert len(removed) == len(FILES)
        for path in removed:
            path.unlink()  # another process's tier evicted them
        # nothing opens or reads them now: only the sweep can let them go
        wait_until(lambda: not _removed_page_files_held(daemon.pid), LET_GO, interval=0.5)
        wait_until(lambda: _published(env, key) == 0, GUARD, interval=0.5)
        assert _published(env, swept) == len(FILES)  # the sweep found them, no request did
        forget_pages(root, FILES)
        assert {k: read_buffered(root / k) for k in FILES} == FILES  # fetched again, right bytes
