"""``list_directory``: one directory level of a version, on every store (sqlite, mongomock,
real Mongo when configured, and the HTTP store over a real API server): what a mount pages
its namespace with (docs/fuse.md, "The namespace")."""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Delete, Put
from datahub.catalog.store import past_subtree
from datahub.errors import InvalidInput, VersionNotFound
from tests.catalog.conftest import raw_store, rec

KEYS = ["a", "a!", "a/x", "a/y/z", "b", "b0", "c/1", "c/2", "c/d/e", "d", "e/f/g/h", "f\U0010ffff"]


def _level(entries) -> list[str]:
    return [e if isinstance(e, str) else e[0] for e in entries]


@pytest.fixture
def tree(catalog: Catalog) -> Catalog:
    catalog.create_dataset("ns")
    catalog.commit("ns", [Put(rec(k)) for k in KEYS])
    catalog.commit("ns", [Delete("b0"), Put(rec("c/3"))])  # v2
    return catalog


def test_levels(tree: Catalog) -> None:
    # a file and a directory of the same name both come, in key order ("a" < "a!" < "a/")
    assert _level(tree.list_directory("ns", 1)) == [
        "a",
        "a!",
        "a/",
        "b",
        "b0",
        "c/",
        "d",
        "e/",
        "f\U0010ffff",
    ]
    assert _level(tree.list_directory("ns", 2)) == ["a", "a!", "a/", "b", "c/", "d", "e/", "f\U0010ffff"]
    assert _level(tree.list_directory("ns", 1, prefix="c/")) == ["c/1", "c/2", "c/d/"]
    assert _level(tree.list_directory("ns", 2, prefix="c/")) == ["c/1", "c/2", "c/3", "c/d/"]
    assert _level(tree.list_directory("ns", 1, prefix="e/f/")) == ["e/f/g/"]
    assert _level(tree.list_directory("ns", 1, prefix="nothing/")) == []
    files = [e for e in tree.list_directory("ns", 1, prefix="a/") if not isinstance(e, str)]
    assert files == [("a/x", "s3://bucket/a/x", rec("a/x").etag, 10, None)]


def test_files_are_lean_rows_with_the_mtime_of_meta(catalog: Catalog) -> None:
    # a file is a DirFile (key, url, etag, size, mtime): meta's "mtime" when it is a number,
    # None otherwise (absent, a string, a boolean), whatever else meta and labels hold
    metas = {
        "i": {"mtime": 1700000000},
        "f": {"mtime": 1700000000.25, "split": "train"},
        "b": {"mtime": True},
        "s": {"mtime": "yesterday"},
        "n": {"deep": {"mtime": 3}},
        "z": {},
    }
    catalog.create_dataset("m")
    changes = [Put(rec(k, meta=m, labels={"mtime": 9})) for k, m in metas.items()] + [Put(rec("d/x"))]
    catalog.commit("m", changes)
    got = {e[0]: e for e in catalog.list_directory("m", 1) if not isinstance(e, str)}
    assert {k: e[4] for k, e in got.items()} == {
        "i": 1700000000, "f": 1700000000.25, "b": None, "s": None, "n": None, "z": None
    }  # fmt: skip
    assert type(got["i"][4]) is int and got["f"][1:4] == ("s3://bucket/f", rec("f").etag, 10)


def test_pages_of_files_around_subdirectories(catalog: Catalog) -> None:
    # more files than a store's page (made 20 rows here), with subdirectories at the start,
    # inside and at the end: every level entry once, in order, with and without limits
    raw_store(catalog).page_size = 20  # type: ignore[attr-defined]
    keys = [f"p/{i:05d}" for i in range(41)] + ["p/00000/x", "p/00021/y/z", "p/00040/w"]
    catalog.create_dataset("big")
    catalog.commit("big", [Put(rec(k)) for k in keys])
    level = _level(catalog.list_directory("big", 1, prefix="p/"))
    files = [f"p/{i:05d}" for i in range(41)]
    assert level == sorted(files + ["p/00000/", "p/00021/", "p/00040/"])
    assert _level(catalog.list_directory("big", 1, prefix="p/", start_after="p/00021", limit=3)) == [
        "p/00021/", "p/00022", "p/00023"
    ]  # fmt: skip


def test_cursor_and_limit(tree: Catalog) -> None:
    whole = _level(tree.list_directory("ns", 1))
    for i in range(len(whole)):
        assert _level(tree.list_directory("ns", 1, start_after=whole[i])) == whole[i + 1 :]
        assert _level(tree.list_directory("ns", 1, limit=i)) == whole[:i]
    paged, after = [], ""
    while page := _level(tree.list_directory("ns", 1, start_after=after, limit=2)):
        paged += page
        after = page[-1]
    assert paged == whole


def test_refusals(tree: Catalog) -> None:
    with pytest.raises(InvalidInput):
        list(tree.list_directory("ns", 1, prefix="c"))
    with pytest.raises(VersionNotFound):
        list(tree.list_directory("ns", 9))


def test_past_subtree_is_above_every_key_below() -> None:
    deepest = "a/" + "\U0010ffff" * 255  # 1022 bytes: the longest run of the greatest code point
    assert "a/" < deepest < past_subtree("a/") < "a0"
