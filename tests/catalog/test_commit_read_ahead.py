"""A SQLite commit on a base reads each next batch's B-tree pages ahead on reader threads
(``sqlite_read_ahead``): it only reads, so the version is the same with or without it, a
read-ahead that fails changes nothing, and no reader thread outlives the commit."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from datahub.catalog import Catalog, Delete, Patch, Put, Record, sqlite_store
from datahub.catalog.sqlite_read_ahead import LeafReadAhead
from datahub.catalog.sqlite_store import SQLiteCatalogStore

N = 600


def _record(i: int, generation: int = 0) -> Record:
    key = f"d{i // 100:02}/f{i:04}.jpg"
    return Record(key, f"s3://b/{key}", f"e{i}-{generation}", i, meta={"split": "train"})


def _spread() -> list:
    """Puts, deletes and patches one key in every seven, and new keys among them."""
    out: list = []
    for j, i in enumerate(range(3, N, 7)):
        kind = j % 4
        if kind == 0:
            out.append(Put(_record(i, 1)))
        elif kind == 1:
            out.append(Delete(_record(i).key))
        elif kind == 2:
            out.append(Patch(_record(i).key, labels={"class": "cat"}))
        else:
            out.append(Put(Record(f"d{i // 100:02}/g{i:04}.jpg", "s3://b/g", "g", 1)))
    return out


def _commit_both(path: Path, threads: int) -> tuple[list[Record], tuple]:
    catalog = Catalog(SQLiteCatalogStore(path, batch_size=16, read_ahead_threads=threads))
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", [Put(_record(i)) for i in range(N)])
        v2 = catalog.commit("ds", _spread())
        counts = (v2.record_count, v2.total_bytes, v2.added, v2.removed, v2.modified)
        return list(catalog.list_records("ds", 2)), counts
    finally:
        catalog.close()


def test_the_version_is_the_same_with_and_without_reading_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[LeafReadAhead] = []

    class Recorded(LeafReadAhead):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(sqlite_store, "LeafReadAhead", Recorded)
    ahead = _commit_both(tmp_path / "ahead.db", 4)
    assert made[-1].keys_read > 0  # the spread commit's batches were read ahead
    assert made[0].keys_read == 0  # a first version has no base to read
    assert ahead == _commit_both(tmp_path / "plain.db", 0)
    assert not [t for t in threading.enumerate() if t.name.startswith("datahub-commit-ahead")]


def test_a_read_ahead_that_fails_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(LeafReadAhead):
        def _conn(self) -> sqlite3.Connection:
            raise sqlite3.OperationalError("unable to open database file (test)")

    monkeypatch.setattr(sqlite_store, "LeafReadAhead", Failing)
    assert _commit_both(tmp_path / "failing.db", 4) == _commit_both(tmp_path / "plain.db", 0)


def test_an_earlier_change_s_error_comes_first_as_without_reading_ahead(tmp_path: Path) -> None:
    """The look-ahead reads batch k + 1 before batch k is planned; the caller's generator
    failing there must not hide the error of a change in batch k. (The catalog's checks read
    ``CHECK_CHUNK`` changes ahead anyway: the failure lies just past that chunk.)"""
    from datahub.catalog.catalog import CHECK_CHUNK
    from datahub.errors import RecordNotFound

    catalog = Catalog(SQLiteCatalogStore(tmp_path / "c.db", batch_size=16, read_ahead_threads=2))
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", [Put(_record(i)) for i in range(N)])

        def changes():
            new = (Put(Record(f"n/{i:05}", "s3://b/n", "n", 1)) for i in range(CHECK_CHUNK + 20))
            for i, put in enumerate(new):
                if i == CHECK_CHUNK - 10:  # in the last batch of the first chunk
                    yield Delete("no/such/key.jpg")
                if i == CHECK_CHUNK + 5:  # in the batch after it
                    raise RuntimeError("the caller's generator failed (test)")
                yield put

        with pytest.raises(RecordNotFound):
            catalog.commit("ds", changes())
        assert catalog.resolve("ds", "latest").seq == 1  # nothing written
    finally:
        catalog.close()
