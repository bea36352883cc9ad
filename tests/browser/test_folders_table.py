"""The folder view from the directory table (``folders.by_directory``, what ``browse`` does
without a filter) shows every page exactly as the walk of the key-ordered listing
(``folders.by_keys``, the view before the table) does: the same entries, records and next
cursors, for every version of a history of adds, deletes and moves, under every folder,
at several page sizes, on SQLite, MongoDB (mongomock, a real server with
DATAHUB_TEST_MONGO_URI) and the remote store. And a page of 100 folders costs a few queries,
not one per folder (counted on mongomock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.browser import folders
from datahub.catalog import Catalog, Delete, Put, Record
from tests.catalog.conftest import STORES, make_store
from tests.catalog.test_directory_table import model_level
from tests.catalog.test_mongo_dirs import examined


def record(key: str, n: int = 0) -> Record:
    return Record(key, f"memory://b/{key}", f"e{n}", len(key) + n, labels={"n": n}, meta={"mtime": n})


def move(old: str, new: str) -> list:
    return [Delete(old), Put(record(new, 7))]


V1 = ["a/1", "a/2", "a/b/3", "a b/x", "a-b/y", "a.b", "b/1", "c", "d/e/f", "é/x", "z"]
V1 += [f"f{i:02d}/x" for i in range(12)]
HISTORY: list[list] = [
    [Put(record(k)) for k in V1],
    # adds and deletes: g/h/ appears, d/ and c go, a/ gains a file and one is replaced
    [Put(record("g/h/1")), Delete("d/e/f"), Delete("c"), Put(record("a/3")), Put(record("a/1", 2))],
    # moves: d/ comes back with a/b/'s file (a/b/ goes), b/ moves to bb/, a folder becomes a file
    move("a/b/3", "d/e/3") + move("b/1", "bb/1") + move("f05/x", "f05x"),
    # everything under a/ goes, then one file comes back; half the f folders go
    [Delete(k) for k in ("a/1", "a/2", "a/3")]
    + [Put(record("a/new"))]
    + [Delete(f"f{i:02d}/x") for i in range(0, 12, 2)],
]


def states() -> list[set[str]]:
    keys: set[str] = set()
    out = []
    for changes in HISTORY:
        for c in changes:
            (keys.add if isinstance(c, Put) else keys.discard)(c.record.key if isinstance(c, Put) else c.key)
        out.append(set(keys))
    return out


def pages(view, catalog: Catalog, seq: int, prefix: str, limit: int) -> list:
    got, after = [], ""
    while after is not None:
        entries, after = view(catalog, "ds", seq, prefix=prefix, after=after, limit=limit)
        got.append((entries, after))
    return got


def check_views(catalog: Catalog) -> None:
    """Every page of every folder of every version: the directory view equals the keyed walk."""
    every = set().union(*states())
    prefixes = sorted({""} | {k[: i + 1] for k in every for i, ch in enumerate(k) if ch == "/"})
    for seq, keys in enumerate(states(), 1):
        for prefix in prefixes:
            for limit in (1, 2, 3, 100):
                table = pages(folders.by_directory, catalog, seq, prefix, limit)
                keyed = pages(folders.by_keys, catalog, seq, prefix, limit)
                assert table == keyed, (seq, prefix, limit)
                shown = [e.path for page, _ in table for e in page]
                assert shown == model_level(keys, prefix), (seq, prefix, limit)
        # browse takes the table's way without a filter
        assert folders.browse(catalog, "ds", seq) == folders.by_directory(
            catalog, "ds", seq, prefix="", after="", limit=100
        )
    # a cursor of the keyed walk (a folder followed by U+10FFFF) goes on in the table's view
    first, cursor = folders.by_keys(catalog, "ds", 1, prefix="", after="", limit=2)
    assert cursor is not None and cursor.endswith(folders.PAST)
    assert folders.by_directory(catalog, "ds", 1, prefix="", after=cursor, limit=3) == folders.by_keys(
        catalog, "ds", 1, prefix="", after=cursor, limit=3
    )


def committed(kind: str, tmp_path: Path) -> Catalog:
    catalog = Catalog(make_store(kind, tmp_path))
    catalog.create_dataset("ds")
    for changes in HISTORY:
        catalog.commit("ds", changes)
    return catalog


@pytest.mark.parametrize("kind", STORES)
def test_the_folder_view_from_the_table_is_the_keyed_walks_page_for_page(kind: str, tmp_path: Path) -> None:
    catalog = committed(kind, tmp_path)
    try:
        check_views(catalog)
    finally:
        catalog.close()


@pytest.mark.parametrize("kind", ["sqlite", "mongomock"])
def test_a_dataset_without_its_table_shows_the_same_folders(kind: str, tmp_path: Path) -> None:
    """A dataset an older datahub made (its table not filled yet) lists through the same call."""
    catalog = committed(kind, tmp_path)
    try:
        store = catalog.store
        if kind == "sqlite":
            with store._conn() as conn:
                conn.execute("UPDATE datasets SET dirs = 0")
        else:
            store.datasets.update_one({"_id": "ds"}, {"$unset": {"dirs": ""}})
        assert store._directory_index("ds", 1) is None
        check_views(catalog)
    finally:
        catalog.close()


def test_a_page_of_a_hundred_folders_costs_a_few_queries_not_one_per_folder(tmp_path: Path) -> None:
    store = make_store("mongomock", tmp_path, batch_size=2000, page_size=200)
    catalog = Catalog(store)
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", [Put(record(f"s{i:03d}/x")) for i in range(150)] + [Put(record("top.jpg"))])
        asked = [0]
        _, (entries, cursor) = examined(store, lambda: folders.browse(catalog, "ds", 1, limit=100), asked)
        assert [e.name for e in entries] == [f"s{i:03d}/" for i in range(100)]
        assert cursor is not None
        # the subdirectories' read and one read of the files between them (the files' records:
        # none on this page); the keyed walk made one query per folder shown
        assert asked[0] == 2, asked
        asked = [0]
        _, (entries, cursor) = examined(store, lambda: folders.browse(catalog, "ds", 1, after=cursor), asked)
        assert [e.name for e in entries] == [f"s{i:03d}/" for i in range(100, 150)] + ["top.jpg"]
        assert cursor is None and entries[-1].record == record("top.jpg")
        assert asked[0] == 3, asked  # and one read of the records of the files shown
        asked = [0]
        examined(store, lambda: folders.by_keys(catalog, "ds", 1, prefix="", after="", limit=100), asked)
        assert asked[0] >= 100, asked
    finally:
        catalog.close()
