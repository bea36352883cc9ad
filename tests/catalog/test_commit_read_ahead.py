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
