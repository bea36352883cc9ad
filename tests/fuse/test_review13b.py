"""review13b: the snapshot a bucket mount commits into must be one no pod may open.

Without FUSE: the mount's own rule (``bucket_listing.foreign_snapshot``) and the dataset the
mount makes (``layout.snapshot_dataset_name``, source = its URL) against the CSI plugin's
(``csi.access.require``). Schemes are case-insensitive (the storage layer reads ``S3://`` as
``s3://``), but the CSI plugin knows a snapshot by its source's scheme as written followed
by a dot at the start of its name, and the name is always in lower case.
"""

from __future__ import annotations

import pytest

from csi import access
from datahub.catalog.model import Dataset
from datahub.errors import AccessDenied
from fuse_adapter.bucket_listing import foreign_snapshot
from fuse_adapter.layout import snapshot_dataset_name

POD = "system:serviceaccount:team-b:reader"
URLS = [
    "s3://platform/team-a",
    "s3://platform/team-a/",
    "s3://Platform/Team-A",
    "S3://platform/team-a",
    "s3://platform.eu/team-a",
    "s3://platform/a%2Fb/c",
    "Memory://space/p",
    "file:///Data/Team-A/",
    "s3://platform/" + "x" * 80,
]


@pytest.mark.parametrize("url", URLS)
def test_a_dataset_a_mount_commits_its_listing_into_is_open_to_no_pod(url: str) -> None:
    """A mount of ``S3://platform/team-a`` made ``s3.platform.team-a`` with source
    ``S3://platform/team-a`` and committed its listing into it (the source is its URL); the CSI
    plugin did not see a bucket snapshot in it (``S3.`` does not start the name), so the
    ownerless dataset was open to every pod: any pod's dataset volume of it read the tenant's
    objects through the plugin's credentials."""
    made = Dataset(snapshot_dataset_name(url), source=url)
    if foreign_snapshot(made, url):
        return  # nothing is committed into it
    with pytest.raises(AccessDenied):
        access.require(made, POD, "reader")
    with pytest.raises(AccessDenied):
        access.require(made, None, "reader")


def test_a_trailing_slash_names_the_same_snapshot_and_another_bucket_does_not() -> None:
    """The rule's own cases: ``s3://b/p`` and ``s3://b/p/`` are one prefix; ``s3://b.p/q`` and
    ``s3://b/p/q`` are different buckets (they shared the name ``s3.b.p.q`` until snapname14,
    ``tests/catalog/test_snapname14.py``)."""
    made = Dataset("s3.b.p", source="s3://b/p/")
    assert foreign_snapshot(made, "s3://b/p") == ""
    assert snapshot_dataset_name("s3://b/p/") == snapshot_dataset_name("s3://b/p") == "s3.b.p"
    assert snapshot_dataset_name("s3://b.p/q") != snapshot_dataset_name("s3://b/p/q") == "s3.b.p.q"
    assert foreign_snapshot(Dataset("s3.b.p.q", source="s3://b/p/q"), "s3://b.p/q")


def test_a_mount_of_an_upper_case_scheme_serves_its_listing_and_commits_none(tmp_path) -> None:
    """The mount's own path (``BucketLister``, a real in-memory bucket and SQLite catalog):
    the dataset made as ``layout.bucket_view`` makes it for ``MEMORY://…`` gets no version,
    and ``.datahub`` says why; the listing is served all the same."""
    from datahub.catalog import open_catalog
    from datahub.storage.memory import MemoryStore, drop_memory_space
    from fuse_adapter.bucket_listing import BucketLister
    from fuse_adapter.mount_info import MountInfo
    from fuse_adapter.tree import ROOT_INODE, ListingTree

    store = MemoryStore("review13b-upper")
    try:
        for key in ("a/1.bin", "b/2.bin"):
            store.put(key, key.encode())
        url = "MEMORY://" + store.root_url.partition("://")[2]
        dataset = snapshot_dataset_name(url)
        catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
        catalog = open_catalog(catalog_url)
        try:
            catalog.create_dataset(dataset, description="as bucket_view makes it", source=url)
        finally:
            catalog.close()
        tree = ListingTree(mtime=0)
        info = MountInfo(source=url)
        lister = BucketLister(
            tree, tree.start_feed(ROOT_INODE, store.url_for("")), store, info,
            lambda: open_catalog(catalog_url), dataset, url, whole_max=0,
        )  # fmt: skip
        lister.run()
        catalog = open_catalog(catalog_url)
        try:
            assert (catalog.store.head(dataset) or 0) == 0, (
                "the listing went into a dataset open to every pod"
            )
        finally:
            catalog.close()
        assert info.state == "ready" and "not in lower case" in info.snapshot, info.snapshot
        assert info.files == 2
    finally:
        drop_memory_space(store.name)
