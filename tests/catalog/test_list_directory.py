"""``list_directory``: one directory level of a version, on every store (sqlite, mongomock,
real Mongo when configured, and the HTTP store over a real API server): what a mount pages
its namespace with (docs/fuse.md, "The namespace")."""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Delete, Put
from datahub.catalog.store import past_subtree
from datahub.errors import InvalidInput, VersionNotFound
from tests.catalog.conftest import rec

KEYS = ["a", "a!", "a/x", "a/y/z", "b", "b0", "c/1", "c/2", "c/d/e", "d", "e/f/g/h", "f\U0010ffff"]


def _level(entries) -> list[str]:
    return [e if isinstance(e, str) else e.key for e in entries]


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
    records = [e for e in tree.list_directory("ns", 1, prefix="a/") if not isinstance(e, str)]
    assert records[0].url == "s3://bucket/a/x" and records[0].size == 10


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
