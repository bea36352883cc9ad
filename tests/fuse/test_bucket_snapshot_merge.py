"""A bucket snapshot's commit merges the listing with the head, never holding the head whole.

Issue 38 ("peak RSS of any catalog operation ≤ 400 MB at 10⁸"): the commit of a bucket
listing held the previous version's whole key set in a Python set (10⁷ keys: GBs). Now
``_exactly`` is a streaming merge of the listing with the head's records (both in key
order). Without FUSE: a real SQLite catalog and the ``BucketLister``'s own commit.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Put, Record, open_catalog
from datahub.errors import InvalidInput
from fuse_adapter.bucket_listing import BucketLister
from fuse_adapter.layout import MountInfo

N = 100_000
DATASET = "s3.snap"


def _key(i: int) -> str:
    return f"d{i // 1000:03d}/o{i % 1000:03d}.jpg"


def _record(key: str, size: int = 10) -> Record:
    return Record(key, f"s3://snap/{key}", "e", size, meta={"mtime": 1.0})


def _lister(url: str) -> BucketLister:
    """A lister whose commit is the real one; the tree, feed and store play no part in it."""
    return BucketLister(
        None, None, None, MountInfo(source="s3://snap"), lambda: open_catalog(url), DATASET, "s3://snap",
        whole_max=0,
    )  # fmt: skip


def _catalog_with_head(tmp_path: Path, keys: list[str]) -> str:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = open_catalog(url)
    try:
        catalog.create_dataset(DATASET, source="s3://snap")  # as a mount makes it; any local user commits
        catalog.commit(DATASET, (Put(_record(k)) for k in keys), message="head", author="mallory")
    finally:
        catalog.close()
    return url


def _listing(keys: list[str]) -> Iterator[Record]:
    """The bucket's listing as a mount streams it (S3 pages: nothing held but the page)."""
    for k in keys:
        yield _record(k, size=11)


def test_a_snapshot_of_1e5_keys_holds_the_head_one_record_at_a_time(tmp_path: Path) -> None:
    head_keys = sorted([_key(i) for i in range(N)] + ["planted/ghost.txt"])
    url = _catalog_with_head(tmp_path, head_keys)
    deleted = {_key(i) for i in range(0, N, 97)}  # gone from the bucket since the head
    added = [f"d{i:03d}/new.jpg" for i in range(0, 100, 7)]
    bucket = sorted({_key(i) for i in range(N)} - deleted | set(added))

    # what the old commit held: the head's key set
    catalog = open_catalog(url)
    try:
        tracemalloc.start()
        held = {r.key for r in catalog.list_records(DATASET, 1)}
        key_set_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(held) == N + 1
        del held
    finally:
        catalog.close()

    lister = _lister(url)
    tracemalloc.start()
    try:
        version = lister._commit(lambda: _listing(bucket))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert version is not None, lister._info.error
    # the whole commit (its batches, the head's listing pages) peaks below the key set alone (at
    # 10^5 keys about half of it; the old commit held the set and all of that)
    assert peak < key_set_bytes, (peak, key_set_bytes)

    catalog = open_catalog(url)
    try:
        snapshot = [(r.key, r.size) for r in catalog.list_records(DATASET, version.seq)]
    finally:
        catalog.close()
    assert snapshot == [(k, 11) for k in bucket]  # exactly the listing: planted and deleted keys gone
    assert (version.added, version.removed, version.modified) == (
        len(added),
        len(deleted) + 1,
        N - len(deleted),
    )


def test_a_snapshot_deletes_what_the_bucket_lacks_at_either_end_and_between(tmp_path: Path) -> None:
    url = _catalog_with_head(tmp_path, ["a", "a/b", "a0", "m", "planted", "zz"])
    version = _lister(url)._commit(lambda: _listing(["a.txt", "a/b", "b", "m"]))
    assert version is not None
    catalog = open_catalog(url)
    try:
        assert [r.key for r in catalog.list_records(DATASET, version.seq)] == ["a.txt", "a/b", "b", "m"]
    finally:
        catalog.close()


def test_a_snapshot_reads_the_heads_keys_and_no_record_of_it(tmp_path: Path, monkeypatch) -> None:
    """The merge needs only the head's keys (every listed record is put whole): its records,
    each decoded with its meta, were read and dropped unused (a fifth of a 10^5-key commit)."""
    from datahub.catalog.sqlite_store import SQLiteCatalogStore

    url = _catalog_with_head(tmp_path, ["a", "b", "planted", "z"])

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a snapshot's merge listed the head's records")

    monkeypatch.setattr(SQLiteCatalogStore, "list_records", refused)
    lister = _lister(url)
    version = lister._commit(lambda: _listing(["a", "c", "z"]))
    assert version is not None, lister._info.error
    monkeypatch.undo()
    catalog = open_catalog(url)
    try:
        assert [r.key for r in catalog.list_records(DATASET, version.seq)] == ["a", "c", "z"]
    finally:
        catalog.close()
    assert (version.added, version.removed, version.modified) == (1, 2, 2)


def test_a_listing_out_of_key_order_commits_nothing(tmp_path: Path) -> None:
    """A merge of a listing out of order would delete keys the bucket holds: refused."""
    url = _catalog_with_head(tmp_path, ["a", "b", "c"])
    lister = _lister(url)
    assert lister._commit(lambda: _listing(["a", "c", "b"])) is None
    assert lister._info.state == "failed" and "not in key order" in lister._info.error
    catalog = open_catalog(url)
    try:
        assert catalog.resolve(DATASET).seq == 1
    finally:
        catalog.close()


@pytest.mark.parametrize("put_unchanged", [False, True])
def test_changes_between_is_one_merge_for_derive_and_snapshots(put_unchanged: bool) -> None:
    from datahub.catalog import Delete
    from datahub.catalog.catalog import changes_between

    current = [_record("a"), _record("b"), _record("c"), _record("e")]
    wanted = [_record("b"), _record("c", size=5), _record("d"), _record("e")]
    got = list(changes_between(iter(current), iter(wanted), put_unchanged=put_unchanged))
    same = [Put(_record("b"))] if put_unchanged else []
    tail = [Put(_record("e"))] if put_unchanged else []
    assert got == [Delete("a"), *same, Put(_record("c", size=5)), Put(_record("d")), *tail]
    with pytest.raises(InvalidInput, match="not in key order"):
        list(changes_between(iter(current), iter([_record("b"), _record("b")])))


def test_records_planted_while_the_snapshot_waits_for_its_turn_are_deleted(tmp_path: Path) -> None:
    """Any token may commit to the snapshot dataset. A commit landing between the snapshot's
    reading of the head and its own turn made the snapshot go on top of it while deleting only
    the older head's keys: the planted record stayed in the snapshot (commit11's finding).
    Now the snapshot names its base, is refused (StaleBase), and takes the new head again."""
    url = _catalog_with_head(tmp_path, ["a", "b"])
    plants: list[int] = []

    class PlantingFirst:
        """The mount's catalog; another principal's commit lands just before the first one."""

        def __init__(self) -> None:
            self._catalog = open_catalog(url)

        def __getattr__(self, name: str):
            return getattr(self._catalog, name)

        def commit(self, dataset: str, changes, **kw):
            if not plants:
                other = open_catalog(url)
                try:
                    v = other.commit(DATASET, [Put(_record("ghost.txt"))], message="plant", author="mallory")
                finally:
                    other.close()
                plants.append(v.seq)
            return self._catalog.commit(dataset, changes, **kw)

    lister = BucketLister(
        None, None, None, MountInfo(source="s3://snap"), PlantingFirst, DATASET, "s3://snap", whole_max=0
    )  # fmt: skip
    version = lister._commit(lambda: _listing(["a", "b", "c"]))
    assert version is not None, lister._info.error
    assert plants == [2] and version.seq == 3
    catalog = open_catalog(url)
    try:
        assert [r.key for r in catalog.list_records(DATASET, version.seq)] == ["a", "b", "c"]
    finally:
        catalog.close()
