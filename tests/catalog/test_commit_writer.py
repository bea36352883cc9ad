"""The SQLite commit's rows inserted by a second thread from one JSON array per batch
(``sqlite_writer.RowWriter``) store exactly what binding them row by row (``executemany``,
the path before it, still taken by batches it cannot queue) stored; its errors reach the
caller and roll the whole commit back; no thread outlives a commit."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Catalog, Delete, Patch, Put, Record, sqlite_writer
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import StorageError

# any text but lone surrogates (which no SQLite text can hold): NUL, controls, quotes,
# backslashes, non-BMP characters, the escapes JSON has
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
# a key of meta/labels holds no NUL either, which MongoDB's field names cannot (review74)
NAME = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**62), 2**62)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAME, inner, max_size=3),
    max_leaves=6,
)
MAPPING = st.dictionaries(NAME, JSON_VALUE, max_size=3)
KEYS = [f"k/{c}{i}" for c in "ab" for i in range(6)]


@st.composite
def records(draw: st.DrawFn, key: str) -> Record:
    url = draw(st.sampled_from([f"s3://bucket/{key}", f"memory://bucket/x{draw(st.integers(0, 9))}"]))
    etag = draw(TEXT.filter(str.strip))
    size = draw(st.integers(0, 2**40) | st.just(2**58 + 1))  # large, yet a version's total fits 64 bits
    return Record(key, url, etag, size, draw(TEXT), draw(MAPPING), draw(MAPPING))


@st.composite
def change_sets(draw: st.DrawFn) -> tuple[list, list]:
    """A first version (in key order or not), and a second with puts, deletes and patches."""
    first = draw(st.lists(st.sampled_from(KEYS), min_size=1, unique=True))
    if draw(st.booleans()):
        first.sort()
    v1 = [Put(draw(records(k))) for k in first]
    v2: list = []
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=10)):
        kind = draw(st.sampled_from(["put", "delete", "patch"]))
        live = {c.record.key for c in v1 if isinstance(c, Put)}
        if kind == "put" or key not in live or any(getattr(c, "key", None) == key for c in v2):
            v2.append(Put(draw(records(key))))
        elif kind == "delete":
            v2.append(Delete(key))
        else:
            v2.append(Patch(key, meta=draw(MAPPING), labels=draw(MAPPING)))
    return v1, v2


def stored(path: Path) -> tuple[list, list]:
    """Every row of ``records`` with each value's SQLite type, and the versions' counts."""
    conn = sqlite3.connect(path)
    try:
        columns = "dataset_id, key, from_seq, to_seq, url, etag, size, checksum, meta, labels"
        typed = ", ".join(f"{c}, typeof({c})" for c in columns.split(", "))
        rows = conn.execute(f"SELECT {typed} FROM records ORDER BY dataset_id, key, from_seq").fetchall()
        versions = conn.execute(
            "SELECT seq, record_count, total_bytes, added, removed, modified FROM versions ORDER BY seq"
        ).fetchall()
        return rows, versions
    finally:
        conn.close()


def commit_both(path: Path, v1: list, v2: list) -> tuple[list, list]:
    catalog = Catalog(SQLiteCatalogStore(path, batch_size=3))
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", v1)
        if v2:
            catalog.commit("ds", v2)
    finally:
        catalog.close()
    return stored(path)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change_sets())
def test_rows_from_one_json_array_are_the_rows_bound_one_by_one(
    monkeypatch: pytest.MonkeyPatch, sets: tuple[list, list]
) -> None:
    v1, v2 = sets
    with tempfile.TemporaryDirectory() as tmp:
        threaded = commit_both(Path(tmp) / "threaded.db", v1, v2)
        with monkeypatch.context() as patch:
            patch.setattr(sqlite_writer, "MAX_QUEUED_CHARS", -1)  # every batch bound row by row
            by_row = commit_both(Path(tmp) / "by_row.db", v1, v2)
    assert threaded == by_row


def test_a_nul_in_a_value_is_stored_whole(tmp_path: Path) -> None:
    """SQLite's JSON functions cut a string at an escaped NUL; such a batch is bound row by row."""
    catalog = Catalog(SQLiteCatalogStore(tmp_path / "c.db", batch_size=2))
    catalog.create_dataset("ds")
    puts = [Put(Record(f"a/{i}", f"s3://b/a/{i}", f"e\x00{i}", 1, meta={"n": f"x\x00{i}"})) for i in range(5)]
    catalog.commit("ds", puts)
    assert [(r.etag, r.meta) for r in catalog.list_records("ds", 1)] == [
        (f"e\x00{i}", {"n": f"x\x00{i}"}) for i in range(5)
    ]
    catalog.close()


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "catalog-commit-rows"]


@pytest.mark.parametrize("threaded", [True, False])
def test_a_failed_insert_rolls_the_commit_back_with_the_same_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threaded: bool
) -> None:
    """An insert failing in the writer thread (a trigger refusing the third batch's row) is
    raised in the caller's thread as the store's error, and nothing of the commit stays."""
    if not threaded:
        monkeypatch.setattr(sqlite_writer, "MAX_QUEUED_CHARS", -1)
    db = tmp_path / "c.db"
    catalog = Catalog(SQLiteCatalogStore(db, batch_size=10))
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(Record("a", "s3://b/a", "e", 1))])
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON records WHEN NEW.key = 'b/00025'"
        " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    )
    conn.commit()
    conn.close()
    puts = (Put(Record(f"b/{i:05d}", f"s3://b/b/{i}", "e", i)) for i in range(60))
    with pytest.raises(StorageError, match="refused by the test"):
        catalog.commit("ds", puts)
    assert not writer_threads()
    assert [v.seq for v in catalog.log("ds")] == [1]
    assert [(row[2], row[4]) for row in stored(db)[0]] == [("a", 1)]  # only v1's row
    catalog.commit("ds", [Put(Record("c", "s3://b/c", "e", 1))])  # the store goes on
    assert not writer_threads()
    catalog.close()


def test_a_change_set_raising_midway_leaves_no_row_and_no_thread(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    catalog = Catalog(SQLiteCatalogStore(db, batch_size=10))
    catalog.create_dataset("ds")

    def changes():
        for i in range(55):  # five batches queued or written, then the source fails
            yield Put(Record(f"b/{i:05d}", f"s3://b/b/{i}", "e", i))
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        catalog.commit("ds", changes())
    assert not writer_threads()
    assert stored(db) == ([], [])
    catalog.close()
