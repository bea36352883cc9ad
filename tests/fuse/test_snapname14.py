"""snapname14 at the mount: a snapshot of another URL no longer keeps a bucket's listing out.

Without FUSE, the mount's own path (``BucketLister``, a real in-memory bucket, a real SQLite
catalog): the dataset is made as ``layout.bucket_view`` makes it (its URL's name, the URL as
source; an existing one is kept). A mount of ``memory://space/Team-B`` made the dataset
``memory.space.team-b`` before, so every later mount of ``memory://space/team-b`` found a
snapshot of another source under its name and recorded nothing.
"""

from __future__ import annotations

from datahub.catalog import open_catalog, snapshot_dataset_name
from datahub.errors import AlreadyExists
from datahub.storage.memory import MemoryStore, drop_memory_space
from fuse_adapter.bucket_listing import BucketLister
from fuse_adapter.mount_info import MountInfo
from fuse_adapter.tree import ROOT_INODE, ListingTree


def test_a_mount_records_its_listing_after_a_mount_of_a_url_that_once_shared_its_name(tmp_path) -> None:
    store = MemoryStore("snapname14-space", "team-b")
    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    try:
        store.put("a/1.bin", b"1")
        victim = store.root_url
        squat = victim.replace("team-b", "Team-B")
        catalog = open_catalog(catalog_url)
        try:
            for url in (squat, victim):  # the squat's mount first, as bucket_view makes it
                try:
                    catalog.create_dataset(snapshot_dataset_name(url), description="as a mount", source=url)
                except AlreadyExists:
                    pass
        finally:
            catalog.close()
        dataset = snapshot_dataset_name(victim)
        tree = ListingTree(mtime=0)
        info = MountInfo(source=victim)
        lister = BucketLister(
            tree, tree.start_feed(ROOT_INODE, store.url_for("")), store, info,
            lambda: open_catalog(catalog_url), dataset, victim, whole_max=0,
        )  # fmt: skip
        lister.run()
        assert info.state == "ready" and info.snapshot == "committed", info.snapshot
        catalog = open_catalog(catalog_url)
        try:
            assert catalog.store.head(dataset) == 1
            assert [r.key for r in catalog.list_records(dataset, 1)] == ["a/1.bin"]
            assert catalog.get_dataset(dataset).source == victim
        finally:
            catalog.close()
    finally:
        drop_memory_space(store.name)
