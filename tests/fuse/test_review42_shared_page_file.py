"""A page file that backs several inodes is retracted for all of them when the disk tier
evicts it (``FastReads.evicted`` / ``PassthroughOpens.evicted``), and every inode reads back
byte-exact afterwards.

One object is one page file (its name is the record's url and etag): the same record in two
versions of a dataset, or one blob under two keys, makes two inodes with one file. The C
tables' ``retract_file`` retracts the first entry it finds with the file; the mount asked it
once, so the other inodes kept their descriptor of the removed file (its disk space) and,
in passthrough, its backing id, until the once-a-second sweep came round to them (~16 s at
512 slots a tick). The daemon here sweeps nothing (tests/fuse/no_sweep_mount.py): only the
tier's word on the eviction can let the files go, as the test requires.

Real mounts over a disk tier too small for the dataset (as tests/fuse/test_evicted_published.py).
"""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.storage import StoreRegistry
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.fuse.test_evicted_published import DISK, _disk, _published, _removed_page_files_held
from tests.fuse.test_fastread import forget_pages, read_buffered
from tests.fuse.test_passthrough import FILES, GUARD, page_files

pytestmark = pytest.mark.fuse

NO_SWEEP = "tests.fuse.no_sweep_mount"
FIRST = list(FILES)[:3]  # 174 KB: they fit the tier; reading the rest evicts them (lru)
REST = list(FILES)[3:]
COPY = "img/copy.jpg"  # in the second version: the same object as FIRST[0] under another key


@pytest.fixture
def versions(env: FuseEnv) -> tuple[Dataset, Dataset]:
    """Version 1: FILES; version 2: the same records plus ``COPY``, a second key of
    FIRST[0]'s object (its url and etag)."""
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'disk_bytes = {DISK}\npolicy = "lru"\n')  # lru: no admission filter, it evicts
    update = {"disk_bytes": DISK, "policy": "lru"}
    env.config = env.config.model_copy(update={"cache": env.config.cache.model_copy(update=update)})
    v1 = upload_dataset(env, "sh", FILES)
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/data")
        info = store.put(FIRST[0], FILES[FIRST[0]])  # the same bytes: the same etag
        record = Record(COPY, store.url_for(FIRST[0]), info.etag, len(FILES[FIRST[0]]))
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        v2 = catalog.commit("sh", [Put(record)], message="a second key of one object")
    finally:
        catalog.close()
    return v1, Dataset("sh", v2.seq, {**FILES, COPY: FILES[FIRST[0]]}, v2.created_at)


@pytest.mark.parametrize(
    ("args", "key"),
    [(("--no-passthrough",), "page_files_published"), (("--passthrough",), "published")],
    ids=["fastread", "passthrough"],
)
def test_an_evicted_page_file_is_retracted_for_every_inode_it_backs(
    env: FuseEnv, versions: tuple[Dataset, Dataset], args: tuple[str, ...], key: str
) -> None:
    v1, v2 = versions
    mnt = env.mountpoint("sh")
    sources = (f"sh@v{v1.seq}", f"sh@v{v2.seq}")
    with env.mounted(mnt, *sources, "--no-prefetch", *args, module=NO_SWEEP) as daemon:
        assert "the sweep looks at no slot" in (env.root / "mount-sh.log").read_text()  # it took
        old, new = mnt / "sh" / f"v{v1.seq}", mnt / "sh" / f"v{v2.seq}"
        shared = [(old, k) for k in FIRST] + [(new, k) for k in [*FIRST, COPY]]  # 7 inodes, 3 files

        def all_published() -> bool:  # a READ (or OPEN) that reaches Python publishes a disk-tier file
            for root, k in shared:
                forget_pages(root, [k])
                assert read_buffered(root / k) == v2.objects[k]
            return _published(env, key) == len(shared)

        wait_until(all_published, GUARD, interval=0.5)
        before = _disk(env)["evictions"]
        for k in REST:  # cold: written to the tier, which evicts the first ones (lru)
            assert read_buffered(old / k) == FILES[k]
        wait_until(lambda: _disk(env)["evictions"] >= before + len(FIRST), GUARD)
        # nothing reads the shared files again and nothing sweeps: only the eviction retracts
        # them, for each of their inodes, and the daemon then holds no removed page file
        wait_until(lambda: not _removed_page_files_held(daemon.pid), GUARD, interval=0.5)
        assert _published(env, key) <= len(REST)
        for root, k in reversed(shared):  # each inode of an evicted file: fetched again, exact
            forget_pages(root, [k])
            assert read_buffered(root / k) == v2.objects[k]
        forget_pages(new, v2.objects)
        assert {k: read_buffered(new / k) for k in v2.objects} == v2.objects
    assert sum(p.stat().st_size for p in page_files(env)) <= DISK
