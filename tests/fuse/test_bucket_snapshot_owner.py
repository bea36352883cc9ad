"""A bucket mount commits its listing only into a snapshot dataset as mounts make it.

The mount's listing (keys, URLs, etags, sizes of a bucket read with the mount's own
credentials) went into whatever dataset had the snapshot's name: one a token or a local
user created with an owner or an access list (or naming another source) gave its owner
another tenant's bucket listing, then the objects through the platform's credentials
(snapshot13's finding). Without FUSE: a real in-memory object store, a real SQLite catalog
and the mount's ``BucketLister``; the FUSE and CSI mounts of a planted dataset are in
tests/fuse/test_bucket.py and tests/csi/test_grants.py.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.storage.memory import MemoryStore, drop_memory_space
from fuse_adapter.bucket_listing import BucketLister
from fuse_adapter.mount_info import MountInfo
from fuse_adapter.tree import ROOT_INODE, ListingTree

GUARD = 60.0
DATASET = "s3.tenant.data"
KEYS = [f"d{i}/o{j}.bin" for i in range(3) for j in range(4)]
_spaces = itertools.count()


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    store = MemoryStore(f"snapowner-{next(_spaces)}")
    for k in KEYS:
        store.put(k, k.encode())
    yield store
    drop_memory_space(store.name)


def _catalog(tmp_path: Path, **shape: object) -> str:
    """A catalog whose dataset ``DATASET`` has ``shape`` and a planted version 1."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = open_catalog(url)
    try:
        catalog.create_dataset(DATASET, **shape)  # type: ignore[arg-type]
        catalog.commit(DATASET, [Put(Record("ghost.txt", "s3://elsewhere/x", "e", 1))], message="planted")
    finally:
        catalog.close()
    return url


def _lister(store: MemoryStore, catalog_url: str, whole_max: int) -> tuple[BucketLister, MountInfo]:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, store.url_for(""))
    info = MountInfo(source=store.root_url)
    lister = BucketLister(
        tree, feed, store, info, lambda: open_catalog(catalog_url), DATASET, store.root_url, whole_max=whole_max
    )  # fmt: skip
    return lister, info


def _head(catalog_url: str) -> int:
    catalog = open_catalog(catalog_url)
    try:
        return catalog.store.head(DATASET) or 0
    finally:
        catalog.close()


FOREIGN = {
    "an owner": lambda url: {"source": url, "owner": "mallory"},
    "an access list": lambda url: {"source": url, "acl": {"mallory": "reader"}},
    "an access list for everyone": lambda url: {"source": url, "acl": {"*": "reader"}},
    "another source": lambda url: {"source": "s3://attacker/data"},
    "no source": lambda url: {},
}


@pytest.mark.parametrize("shape", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_listing_is_never_committed_into_a_snapshot_dataset_a_mount_did_not_make(
    tmp_path: Path, store: MemoryStore, shape, caplog: pytest.LogCaptureFixture
) -> None:
    catalog_url = _catalog(tmp_path, **shape(store.root_url))
    lister, info = _lister(store, catalog_url, whole_max=0)
    with caplog.at_level("WARNING", logger="fuse_adapter.bucket_listing"):
        lister.run()  # the whole listing: the mount shows it, then the snapshot's turn
    assert _head(catalog_url) == 1, "the listing was committed into a dataset the mount did not make"
    assert lister.version is None and info.versions == []
    assert info.state == "ready" and info.error == ""
    assert info.snapshot.startswith(f"not committed: dataset {DATASET!r}"), info.snapshot
    assert any("not committed" in r.getMessage() for r in caplog.records)
    # the mount still serves its own listing, and the warm-up still has its files
    assert sorted(r.url for r in lister.files()) == sorted(store.url_for(k) for k in KEYS)
    assert info.files == len(KEYS)


@pytest.mark.parametrize("source", ["{url}", "{url}/"])
def test_a_snapshot_dataset_as_mounts_make_it_receives_the_listing(
    tmp_path: Path, store: MemoryStore, source: str
) -> None:
    """No owner, no access list, the mount's URL as its source (a trailing ``/`` names the
    same prefix): the listing is committed, exactly, planted keys deleted."""
    catalog_url = _catalog(tmp_path, source=source.format(url=store.root_url))
    lister, info = _lister(store, catalog_url, whole_max=0)
    lister.run()
    assert lister.version is not None, info.error
    assert info.versions == [f"{DATASET}@v2"] and info.snapshot == "committed"
    catalog = open_catalog(catalog_url)
    try:
        assert [r.key for r in catalog.list_records(DATASET, 2)] == sorted(KEYS)
    finally:
        catalog.close()


def test_a_large_bucket_listed_by_directory_commits_nothing_into_a_foreign_dataset(
    tmp_path: Path, store: MemoryStore
) -> None:
    """By directory, the snapshot was where the warm-up read the whole listing from: with
    none to commit, the whole listing is streamed from the bucket instead."""
    catalog_url = _catalog(tmp_path, source=store.root_url, owner="mallory")
    lister, info = _lister(store, catalog_url, whole_max=2)
    thread = threading.Thread(target=lister.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + GUARD
        while not lister.by_directory:
            assert time.monotonic() < deadline, "never listed by directory"
            time.sleep(0.01)
        lister.want_whole()
        thread.join(GUARD)
        assert not thread.is_alive(), "the whole listing never ended"
        assert _head(catalog_url) == 1 and lister.version is None
        assert info.state == "ready" and info.snapshot.startswith("not committed:"), info.snapshot
        assert sorted(r.url for r in lister.files()) == sorted(store.url_for(k) for k in KEYS)
    finally:
        lister.stop()


def test_a_node_whose_token_may_not_read_its_snapshot_serves_the_listing_unrecorded(
    tmp_path: Path, store: MemoryStore
) -> None:
    """Over HTTP a node whose token is not a global admin's makes the ownerless snapshot
    dataset (the remote store lets it, as a mount does) but may not read it (404), and its
    mount said ``"state": "failed"`` for a listing it served: it is ready, unrecorded."""
    from datahub.api.tokens import issue_token
    from datahub.catalog import Catalog
    from datahub.catalog.http_store import HttpCatalogStore
    from tests.catalog.remote import serve

    server, backing, _admin = serve(tmp_path)
    try:
        node = issue_token(backing.store, "node-1")[0]
        dataset = f"memory.{store.name}"
        remote = Catalog(HttpCatalogStore(server.url, token=node))
        remote.create_dataset(dataset, source=store.root_url)  # as bucket_view makes it
        remote.close()
        tree = ListingTree(mtime=0)
        info = MountInfo(source=store.root_url)
        lister = BucketLister(
            tree, tree.start_feed(ROOT_INODE, store.url_for("")), store, info,
            lambda: Catalog(HttpCatalogStore(server.url, token=node)), dataset, store.root_url, whole_max=0,
        )  # fmt: skip
        lister.run()
        assert (info.state, info.error, lister.version) == ("ready", "", None)
        assert info.snapshot.startswith(f"not committed: dataset {dataset!r} cannot be read"), info.snapshot
        assert sorted(r.url for r in lister.files()) == sorted(store.url_for(k) for k in KEYS)
        assert backing.store.head(dataset) in (None, 0)
    finally:
        server.stop()
        backing.close()
