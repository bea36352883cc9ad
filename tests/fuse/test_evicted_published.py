"""A page file the disk tier evicts while it is published to pyfuse3's C tables is retracted
there at once (``fastread_retract_file`` / ``passthrough_retract_file``: the tier tells the
mount, ``ReadOnlyOps.backing_evicted``), not only when C next finds it changed; and every
file reads back byte-exact afterwards (fetched again, published again).

Real mounts over a disk tier too small for the dataset. Without this file no test drove the
eviction path through C: the others unlink a page file themselves ("what eviction does"),
which C sees at its next READ or OPEN. It is in ``make sanitize``'s list (scripts/sanitize.sh).
With the tier's listener not connected (``mount_assembly``'s ``watch_backing``) both cases
fail: the daemon keeps the removed page files open, their disk space with them.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.fuse.test_fastread import forget_pages, read_buffered
from tests.fuse.test_passthrough import FILES, GUARD, cache_stats, mount_stats, page_files

pytestmark = pytest.mark.fuse

DISK = 400_000  # about a third of FILES (1.1 MB): reading them all evicts the first ones


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'disk_bytes = {DISK}\npolicy = "lru"\n')  # lru: no admission filter, it evicts
    update = {"disk_bytes": DISK, "policy": "lru"}
    env.config = env.config.model_copy(update={"cache": env.config.cache.model_copy(update=update)})
    return upload_dataset(env, "ev", FILES)


def _disk(env: FuseEnv, *, cli: bool = False) -> dict:
    return next(t for t in cache_stats(env, cli=cli)["tiers"] if t["tier"] == "disk")


def _removed_page_files_held(pid: int) -> list[str]:
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.endswith(".page (deleted)"):
                held.append(target)
    return held


def _published(env: FuseEnv, key: str) -> int:
    return int(mount_stats(env).get(key) or 0)


@pytest.mark.parametrize(
    ("args", "key"),
    [(("--no-passthrough",), "page_files_published"), (("--passthrough",), "published")],
    ids=["fastread", "passthrough"],
)
def test_an_evicted_published_page_file_is_retracted_in_c(
    env: FuseEnv, files: Dataset, args: tuple[str, ...], key: str
) -> None:
    mnt = env.mountpoint("ev")
    first, rest = list(FILES)[:3], list(FILES)[3:]  # 174 KB fit the tier; all of them do not
    with env.mounted(mnt, "ev", *args) as daemon:
        root = mnt / "ev" / f"v{files.seq}"

        def first_published() -> bool:  # a READ that reaches Python publishes a disk-tier file
            forget_pages(root, first)
            assert {k: read_buffered(root / k) for k in first} == {k: FILES[k] for k in first}
            return _published(env, key) == len(first)

        wait_until(first_published, GUARD, interval=0.5)
        before = _disk(env, cli=True)["evictions"]  # as the CLI shows it
        for k in rest:  # cold: written to the tier, which evicts the first ones (lru)
            assert read_buffered(root / k) == FILES[k]
        wait_until(lambda: _disk(env)["evictions"] >= before + len(first), GUARD)
        # nothing reads the first files again, so C never finds them changed itself: only the
        # tier's word retracts them, and the daemon then holds no descriptor of a removed page
        # file (its disk space came back)
        wait_until(lambda: not _removed_page_files_held(daemon.pid), GUARD, interval=0.5)
        forget_pages(root, FILES)
        assert {k: read_buffered(root / k) for k in FILES} == FILES
    assert sum(p.stat().st_size for p in page_files(env)) <= DISK
