"""The catalog conformance suite: every store (sqlite, mongomock, real Mongo, and the HTTP store
over a real API server) must pass it."""

from __future__ import annotations

import re

import pytest

from datahub.catalog import Catalog, Dataset, Delete, Patch, Put, RecordFilter
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import (
    AccessDenied,
    AlreadyExists,
    CommitIdReused,
    DatasetNotFound,
    InvalidInput,
    InvalidKey,
    InvalidName,
    ManifestError,
    NoChanges,
    NotFound,
    PreconditionFailed,
    RecordNotFound,
    StaleBase,
    VersionNotFound,
)
from tests.catalog.conftest import raw_store, rec


def keys(records) -> list[str]:
    return [r.key for r in records]


@pytest.fixture
def cat(catalog: Catalog) -> Catalog:
    """A dataset ``ds`` with v1 = a, b, c/1, c/2 and v2 = v1 - a, b modified, + d."""
    catalog.create_dataset("ds", description="test data", owner="alice")
    catalog.commit(
        "ds",
        [
            Put(rec("a")),
            Put(rec("b", labels={"class": "cat"})),
            Put(rec("c/1", labels={"class": "dog"}, meta={"split": "train"})),
            Put(rec("c/2", labels={"class": ["cat", "dog"]}, meta={"split": "test"})),
        ],
        message="first",
        author="alice",
    )
    catalog.commit("ds", [Delete("a"), Put(rec("b", etag="e2", size=20)), Put(rec("d"))], message="second")
    return catalog


# --- datasets ------------------------------------------------------------------------------------
def test_dataset_crud(catalog: Catalog) -> None:
    created = catalog.create_dataset(
        "imagenet-1k", description="d", source="s3://b/p", owner="o", acl={"bob": "reader"}
    )
    assert created.name == "imagenet-1k" and created.created_at > 0
    assert catalog.get_dataset("imagenet-1k") == created
    catalog.create_dataset("alpha")
    assert [d.name for d in catalog.list_datasets()] == ["alpha", "imagenet-1k"]
    updated = catalog.update_dataset("imagenet-1k", description="new", acl={"*": "reader", "bob": "admin"})
    assert updated.description == "new" and updated.source == "s3://b/p"
    assert dict(updated.acl) == {"*": "reader", "bob": "admin"}
    assert catalog.get_dataset("imagenet-1k") == updated
    with pytest.raises(AlreadyExists, match="imagenet-1k"):
        catalog.create_dataset("imagenet-1k")


def test_dataset_bad_input(catalog: Catalog) -> None:
    for bad in ["", "Upper", "-dash", "a" * 64, "a/b", "../x", "sp ace"]:
        with pytest.raises(InvalidName):
            catalog.create_dataset(bad)
    with pytest.raises(InvalidInput, match="role"):
        catalog.create_dataset("x", acl={"bob": "god"})
    catalog.create_dataset("x")
    with pytest.raises(InvalidInput, match="name"):
        catalog.update_dataset("x", name="y")
    with pytest.raises(DatasetNotFound, match="'nope'"):
        catalog.update_dataset("nope", description="z")
    assert [d.name for d in catalog.list_datasets()] == ["x"]


def test_update_writes_only_the_fields_sent(catalog: Catalog) -> None:
    """Issue 12 item 2: an update must never write back fields it did not send, or an edit
    built on a stale read would undo a concurrent one (e.g. restore a revoked admin)."""
    catalog.create_dataset("p", description="d0", source="s0", owner="o", acl={"mallory": "admin"})
    stale = catalog.get_dataset("p")  # what a slow description edit read before the revocation
    assert stale.revision == 0
    revoked = catalog.store.update_dataset("p", {"acl": {}})
    assert revoked.revision == 1 and dict(revoked.acl) == {}
    edited = catalog.store.update_dataset("p", {"description": "d1"})
    assert edited.revision == 2 and edited.description == "d1"
    assert dict(edited.acl) == {} and edited.source == "s0" and edited.owner == "o"
    assert catalog.get_dataset("p") == edited
    assert edited.created_at == stale.created_at


def test_conditional_update_refuses_a_stale_revision(catalog: Catalog) -> None:
    catalog.create_dataset("p", description="d0", owner="o", acl={"mallory": "admin"})
    catalog.update_dataset("p", acl={})
    with pytest.raises(PreconditionFailed, match=r"'p' is at revision 1, not 0") as err:
        catalog.update_dataset("p", expected_revision=0, description="stale")
    assert err.value.http_status == 412 and err.value.details["revision"] == 1
    assert catalog.get_dataset("p").description == "d0" and catalog.get_dataset("p").revision == 1
    done = catalog.update_dataset("p", expected_revision=1, description="fresh")
    assert done.description == "fresh" and done.revision == 2 and dict(done.acl) == {}
    with pytest.raises(DatasetNotFound, match="'nope'"):
        catalog.update_dataset("nope", expected_revision=0, description="z")
    catalog.create_dataset("q")  # never updated: revision 0 matches
    assert catalog.update_dataset("q", expected_revision=0, source="s3://b/q").revision == 1


def test_unknown_dataset_version_tag_named(cat: Catalog) -> None:
    with pytest.raises(DatasetNotFound, match="'nope'"):
        cat.get_dataset("nope")
    with pytest.raises(DatasetNotFound, match="'nope'"):
        cat.resolve("nope", 1)
    with pytest.raises(DatasetNotFound, match="'nope'"):
        cat.commit("nope", [Put(rec("a"))])
    with pytest.raises(VersionNotFound, match="'ds'.*9"):
        cat.resolve("ds", 9)
    with pytest.raises(VersionNotFound, match="'golden'"):
        cat.resolve("ds", "golden")
    with pytest.raises(VersionNotFound, match="9"):
        list(cat.list_records("ds", "v9"))
    with pytest.raises(RecordNotFound, match="'zz'"):
        cat.get_record("ds", 2, "zz")
    cat.create_dataset("empty")
    with pytest.raises(VersionNotFound, match="'empty'.*no versions"):
        cat.resolve("empty")


# --- commits ---------------------------------------------------------------------------------------
def test_commit_versions_and_counts(cat: Catalog) -> None:
    v1, v2 = cat.resolve("ds", 1), cat.resolve("ds", "latest")
    assert (v1.seq, v1.parent, v1.message, v1.author) == (1, None, "first", "alice")
    assert (v1.record_count, v1.total_bytes, v1.added, v1.removed, v1.modified) == (4, 40, 4, 0, 0)
    assert (v2.seq, v2.parent, v2.record_count, v2.total_bytes) == (2, 1, 4, 50)
    assert (v2.added, v2.removed, v2.modified) == (1, 1, 1)
    assert [v.seq for v in cat.log("ds")] == [2, 1]
    assert cat.resolve("ds", "2") == cat.resolve("ds", "v2") == cat.resolve("ds", None) == v2
    assert keys(cat.list_records("ds", 1)) == ["a", "b", "c/1", "c/2"]
    assert keys(cat.list_records("ds", 2)) == ["b", "c/1", "c/2", "d"]
    assert cat.get_record("ds", 1, "b").etag == "e1"
    assert cat.get_record("ds", 2, "b") == rec("b", etag="e2", size=20)


def test_patch_merges_and_removes_fields(cat: Catalog) -> None:
    v3 = cat.commit("ds", [Patch("c/1", labels={"class": "wolf", "box": [1, 2]}, meta={"split": None})])
    r = cat.get_record("ds", v3.seq, "c/1")
    assert dict(r.labels) == {"class": "wolf", "box": [1, 2]} and dict(r.meta) == {}
    assert (r.url, r.etag, r.size) == ("s3://bucket/c/1", "e1", 10)
    assert (v3.added, v3.removed, v3.modified, v3.record_count) == (0, 0, 1, 4)
    assert dict(cat.get_record("ds", 2, "c/1").meta) == {"split": "train"}  # old version unchanged


def test_changes_to_one_key_apply_in_order(catalog: Catalog) -> None:
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("k")), Put(rec("gone"))])
    v2 = catalog.commit(
        "ds",
        [
            Put(rec("k", etag="x")),
            Patch("k", labels={"a": 1}),
            Delete("gone"),
            Put(rec("gone")),
            Put(rec("n")),
        ]
        + [Delete("n")],
    )
    assert keys(catalog.list_records("ds", 2)) == ["gone", "k"]
    assert catalog.get_record("ds", 2, "k") == rec("k", etag="x", labels={"a": 1})
    assert (v2.added, v2.removed, v2.modified, v2.record_count) == (0, 0, 1, 2)
    assert [(e.kind, e.key) for e in catalog.diff("ds", 1, 2)] == [("modified", "k")]


def test_same_key_across_batches(catalog: Catalog) -> None:
    """A key touched again many batches later still nets out right."""
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec(f"k{i:05d}")) for i in range(10)])

    def changes():
        yield Put(rec("k00001", etag="x"))
        yield Delete("k00002")
        yield Put(rec("new"))
        for i in range(100):
            yield Put(rec(f"z{i:05d}"))
        yield Put(rec("k00001"))  # back to the base record: no change after all
        yield Put(rec("k00002"))  # re-put unchanged
        yield Delete("new")
        for i in range(100):
            yield Delete(f"z{i:05d}")
        yield Delete("k00003")

    v2 = catalog.commit("ds", changes())
    assert (v2.added, v2.removed, v2.modified, v2.record_count, v2.total_bytes) == (0, 1, 0, 9, 90)
    assert [(e.kind, e.key) for e in catalog.diff("ds", 1, 2)] == [("removed", "k00003")]
    assert keys(catalog.list_records("ds", 2)) == [f"k{i:05d}" for i in range(10) if i != 3]


def test_patch_or_delete_of_missing_key_writes_nothing(cat: Catalog) -> None:
    for change in (Patch("zz", labels={"a": 1}), Delete("zz"), Delete("a")):
        with pytest.raises(RecordNotFound, match="'zz'|'a'"):
            cat.commit("ds", [Put(rec("new")), change])
        assert cat.resolve("ds").seq == 2
    assert keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d"]


def test_stale_base_conflict_writes_nothing(cat: Catalog) -> None:
    with pytest.raises(StaleBase, match="'ds'.*version 1.*head is now version 2"):
        cat.commit("ds", [Put(rec("x")), Delete("b")], base=1)
    assert [v.seq for v in cat.log("ds")] == [2, 1]
    assert keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d"]
    assert cat.commit("ds", [Put(rec("x"))], base=2).seq == 3


def test_commit_on_head_survives_a_lost_race(cat: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """base=None means the head when the commit runs: a head read just before another
    commit landed is re-read (nothing of the change set was consumed yet)."""
    real_head = cat.store.head
    stale = iter([1])  # the first head() answers as if version 2 had not landed yet
    monkeypatch.setattr(cat.store, "head", lambda ds: next(stale, None) or real_head(ds))
    v3 = cat.commit("ds", (Put(rec(k)) for k in ["x", "y"]))
    assert (v3.seq, v3.parent, v3.added) == (3, 2, 2)
    with pytest.raises(StaleBase):  # an explicit base is never moved
        cat.commit("ds", [Put(rec("z"))], base=2)


def test_failing_change_generator_writes_nothing(cat: Catalog) -> None:
    def manifest():
        for i in range(100):  # several batches are written before the failure
            yield Put(rec(f"m/{i:05d}"))
        yield Delete("b")
        raise ManifestError("manifest.jsonl line 102: not JSON")

    with pytest.raises(ManifestError, match="line 102"):
        cat.commit("ds", manifest())
    assert cat.resolve("ds").seq == 2
    assert keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d"]
    assert keys(cat.list_records("ds", 1)) == ["a", "b", "c/1", "c/2"]
    v3 = cat.commit("ds", [Put(rec("m/1"))])  # the next commit is unaffected
    assert v3.seq == 3 and v3.record_count == 5
    assert [(e.kind, e.key) for e in cat.diff("ds", 2, 3)] == [("added", "m/1")]


def test_bad_keys_refused_and_nothing_written(cat: Catalog) -> None:
    for bad in ["", "/abs", "a/../b", "a//b", "./a", "a\x00b", "tab\there", "x" * 1025, "ok/.."]:
        with pytest.raises(InvalidKey):
            cat.commit("ds", [Put(rec("fine")), Put(rec(bad))])
        with pytest.raises(InvalidKey):
            cat.get_record("ds", 1, bad)
    with pytest.raises(InvalidInput, match="size"):
        cat.commit("ds", [Put(rec("neg", size=-1))])
    assert cat.resolve("ds").seq == 2 and "fine" not in keys(cat.list_records("ds"))


def test_idempotent_commit_id(cat: Catalog) -> None:
    first = cat.commit("ds", [Put(rec("x"))], commit_id="import-42", message="m")
    again = cat.commit("ds", [Put(rec("x"))], commit_id="import-42", base=2)  # a retry: same changes
    assert again == first and again.seq == 3
    assert [v.seq for v in cat.log("ds")] == [3, 2, 1]
    assert keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d", "x"]
    assert cat.commit("ds", [Put(rec("y"))], commit_id="import-43").seq == 4


@pytest.mark.parametrize(
    "changes",
    [
        [Put(rec("x")), Put(rec("y"))],  # more changes
        [Put(rec("x", size=2))],  # the same key, another record
        [Delete("b")],
    ],
)
def test_reused_commit_id_with_other_changes_is_refused(cat: Catalog, changes) -> None:
    """A reused commit id is a retry only with the same change set; otherwise 409 naming the id."""
    cat.commit("ds", [Put(rec("x"))], commit_id="import-42")
    with pytest.raises(CommitIdReused, match="'import-42'.*ds@v3.*different change set") as info:
        cat.commit("ds", changes, commit_id="import-42")
    assert info.value.http_status == 409 and info.value.exit_code == 4
    assert cat.store.head("ds") == 3 and keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d", "x"]


def test_empty_change_set_is_refused_and_makes_no_version(cat: Catalog) -> None:
    with pytest.raises(NoChanges, match="no changes.*'ds'.*no version created"):
        cat.commit("ds", [])
    with pytest.raises(NoChanges):
        cat.commit("ds", iter(()), commit_id="empty-1")
    assert cat.store.head("ds") == 2 and [v.seq for v in cat.log("ds")] == [2, 1]
    assert cat.commit("ds", [Put(rec("z"))], commit_id="empty-1").seq == 3  # the id was not used up


def test_lineage_is_kept(cat: Catalog) -> None:
    v = cat.commit("ds", [Put(rec("z"))], lineage={"from": "imagenet@v3", "resize": 256})
    assert dict(cat.resolve("ds", v.seq).lineage) == {"from": "imagenet@v3", "resize": 256}


# --- tags ------------------------------------------------------------------------------------------
def test_tags_unique_move_untag(cat: Catalog) -> None:
    assert cat.tag("ds", "golden", 1).tags == ("golden",)
    cat.tag("ds", "Release-1.0", "v1")
    assert cat.resolve("ds", "golden").seq == 1
    assert cat.resolve("ds", 1).tags == ("Release-1.0", "golden")
    cat.tag("ds", "golden", "latest")  # moving a tag: still unique in the dataset
    assert cat.resolve("ds", "golden").seq == 2
    assert cat.resolve("ds", 1).tags == ("Release-1.0",)
    assert [v.tags for v in cat.log("ds")] == [("golden",), ("Release-1.0",)]
    cat.untag("ds", "golden")
    with pytest.raises(VersionNotFound, match="'golden'"):
        cat.resolve("ds", "golden")
    with pytest.raises(NotFound, match="'golden'"):
        cat.untag("ds", "golden")
    with pytest.raises(VersionNotFound):
        cat.tag("ds", "later", 7)
    for bad in ["latest", "1abc", "", "has space", "x/y"]:
        with pytest.raises(InvalidName):
            cat.tag("ds", bad, 1)


def test_tags_are_per_dataset(cat: Catalog) -> None:
    cat.create_dataset("other")
    cat.commit("other", [Put(rec("o"))])
    cat.tag("ds", "golden", 2)
    cat.tag("other", "golden", 1)
    assert cat.resolve("ds", "golden").seq == 2 and cat.resolve("other", "golden").seq == 1


# --- listing ---------------------------------------------------------------------------------------
def test_listing_prefix_cursor_limit(cat: Catalog) -> None:
    assert keys(cat.list_records("ds", 2, prefix="c/")) == ["c/1", "c/2"]
    assert keys(cat.list_records("ds", 2, prefix="c")) == ["c/1", "c/2"]
    assert keys(cat.list_records("ds", 2, start_after="c/1")) == ["c/2", "d"]
    assert keys(cat.list_records("ds", 2, start_after="b", limit=2)) == ["c/1", "c/2"]
    assert keys(cat.list_records("ds", 2, limit=0)) == []
    assert keys(cat.list_records("ds", 2, prefix="zz")) == []
    with pytest.raises(InvalidKey):
        list(cat.list_records("ds", 2, prefix="../"))


def test_listing_pages_through_many_records(catalog: Catalog) -> None:
    catalog.create_dataset("big")
    names = [f"p{i % 3}/{i:06d}" for i in range(300)]
    catalog.commit("big", (Put(rec(k)) for k in names))
    catalog.commit("big", (Delete(k) for k in names[::2]))
    assert keys(catalog.list_records("big", 1)) == sorted(names)
    assert keys(catalog.list_records("big", 2)) == sorted(names[1::2])
    cursor, seen = "", []
    while True:  # an API client paging with a cursor
        page = keys(catalog.list_records("big", 2, prefix="p1/", start_after=cursor, limit=11))
        if not page:
            break
        seen += page
        cursor = page[-1]
    assert seen == sorted(k for k in names[1::2] if k.startswith("p1/"))


def test_list_keys_are_the_keys_list_records_gives(catalog: Catalog) -> None:
    """``list_keys`` (a bucket snapshot's merge reads the head's keys alone) lists exactly the
    keys of ``list_records``, in key order, over pages, in every version."""
    catalog.create_dataset("big")
    names = [f"p{i % 3}/{i:06d}" for i in range(300)]
    catalog.commit("big", (Put(rec(k)) for k in names))
    catalog.commit("big", (Delete(k) for k in names[::2]))
    for ref in (1, 2, None):
        assert list(catalog.list_keys("big", ref)) == keys(catalog.list_records("big", ref))
    assert list(catalog.list_keys("big", 2)) == sorted(names[1::2])
    with pytest.raises(VersionNotFound):
        catalog.list_keys("big", 3)
    with pytest.raises(DatasetNotFound):
        catalog.list_keys("nope")


def test_listing_filter(cat: Catalog) -> None:
    assert keys(cat.list_records("ds", 2, where="labels.class=cat")) == ["c/2"]  # b lost its label in v2
    assert keys(cat.list_records("ds", 1, where="labels.class=cat")) == ["b", "c/2"]
    assert keys(cat.list_records("ds", 1, where="labels.class=dog|cat,meta.split!=test")) == ["b", "c/1"]
    assert keys(cat.list_records("ds", 1, where="meta.split?")) == ["c/1", "c/2"]
    assert keys(cat.list_records("ds", 2, where="size>10")) == ["b"]
    assert keys(cat.list_records("ds", 1, where=RecordFilter.parse("labels.class=dog"), limit=1)) == ["c/1"]
    with pytest.raises(InvalidInput, match="filter"):
        list(cat.list_records("ds", 1, where="bogus~x"))


# --- diff ------------------------------------------------------------------------------------------
def test_diff_added_removed_modified_in_key_order(cat: Catalog) -> None:
    entries = list(cat.diff("ds", 1, 2))
    assert [(e.kind, e.key) for e in entries] == [("removed", "a"), ("modified", "b"), ("added", "d")]
    removed, modified, added = entries
    assert removed.old == rec("a") and removed.new is None
    assert modified.old.etag == "e1" and modified.new.etag == "e2"
    assert added.old is None and added.new == rec("d")
    back = list(cat.diff("ds", "v2", "v1"))
    assert [(e.kind, e.key) for e in back] == [("added", "a"), ("modified", "b"), ("removed", "d")]
    assert list(cat.diff("ds", 2, 2)) == []
    assert [(e.kind, e.key) for e in cat.diff("ds", 0, 1)] == [("added", k) for k in ["a", "b", "c/1", "c/2"]]
    assert [e.key for e in cat.diff("ds", 1, 2, prefix="b")] == ["b"]


def test_diff_across_many_versions(cat: Catalog) -> None:
    cat.commit("ds", [Put(rec("a"))])  # v3: a comes back unchanged
    cat.commit("ds", [Put(rec("e")), Delete("c/1")])  # v4
    cat.commit("ds", [Delete("e"), Put(rec("c/2", etag="e9"))])  # v5
    cat.tag("ds", "golden", 5)
    assert [(e.kind, e.key) for e in cat.diff("ds", 1, "golden")] == [
        ("modified", "b"),
        ("removed", "c/1"),
        ("modified", "c/2"),
        ("added", "d"),
    ]
    assert [(e.kind, e.key) for e in cat.diff("ds", 2, 5)] == [
        ("added", "a"),
        ("removed", "c/1"),
        ("modified", "c/2"),
    ]


def test_diff_starts_after_a_key(cat: Catalog) -> None:
    """A page's cursor: the diff from any start key is the whole diff's tail, both ways round,
    with and without a prefix (start keys on, between, before and after the entries)."""
    cat.commit("ds", [Put(rec("a"))])  # v3
    cat.commit("ds", [Put(rec("e")), Delete("c/1")])  # v4
    cat.commit("ds", [Delete("e"), Put(rec("c/2", etag="e9"))])  # v5
    starts = ["", "0", "a", "a0", "b", "c", "c/", "c/1", "c/10", "c/2", "d", "e", "zz", "\U0010ffff"]
    for a, b, prefix in [
        (1, 5, ""),
        (5, 1, ""),
        (0, 5, ""),
        (2, 5, ""),
        (1, 2, ""),
        (5, 0, ""),
        (1, 5, "c/"),
    ]:
        whole = [(e.kind, e.key) for e in cat.diff("ds", a, b, prefix=prefix)]
        for start in starts:
            tail = [(e.kind, e.key) for e in cat.diff("ds", a, b, prefix=prefix, start_after=start)]
            assert tail == [(k, key) for k, key in whole if key > start], (a, b, prefix, start)


# --- derive ----------------------------------------------------------------------------------------
def test_derive_into_new_dataset(cat: Catalog) -> None:
    cat.update_dataset("ds", acl={"carol": "admin"})
    v = cat.derive("ds", 1, "labels.class=cat", to_dataset="cats", author="bob", owner="bob")
    assert (v.dataset, v.seq, v.record_count, v.author) == ("cats", 1, 2, "bob")
    assert dict(v.lineage) == {"derived_from": "ds@v1", "filter": "labels.class=cat"}
    assert keys(cat.list_records("cats")) == ["b", "c/2"]
    created = cat.get_dataset("cats")  # the create rule: nothing of the source's owner or ACL
    assert (created.owner, dict(created.acl)) == ("bob", {})
    again = cat.derive("ds", 2, "labels.class=cat", to_dataset="cats")  # existing target: a new version
    assert again.seq == 2 and keys(cat.list_records("cats")) == ["c/2"]
    assert [(e.kind, e.key) for e in cat.diff("cats", 1, 2)] == [("removed", "b")]


def test_derive_in_same_dataset(cat: Catalog) -> None:
    v3 = cat.derive("ds", "latest", "labels.class=dog")
    assert v3.seq == 3 and v3.parent == 2 and (v3.removed, v3.added) == (2, 0)
    assert keys(cat.list_records("ds")) == ["c/1", "c/2"]
    assert keys(cat.list_records("ds", 2)) == ["b", "c/1", "c/2", "d"]  # old versions untouched
    with pytest.raises(InvalidInput):
        cat.derive("ds", 1, "")
    with pytest.raises(InvalidName):
        cat.derive("ds", 1, "labels.class=dog", to_dataset="Bad Name")


def test_a_derive_that_changes_nothing_makes_no_version(cat: Catalog) -> None:
    """Like an empty commit: a derive whose result equals the target's head is refused."""
    cat.derive("ds", "latest", "labels.class=dog")  # v3
    with pytest.raises(NoChanges, match="no version created"):
        cat.derive("ds", "latest", "labels.class=dog")
    assert cat.resolve("ds").seq == 3
    cat.derive("ds", 2, "labels.class=dog", to_dataset="dogs")
    with pytest.raises(NoChanges):
        cat.derive("ds", 2, "labels.class=dog", to_dataset="dogs")
    assert cat.resolve("dogs").seq == 1


def test_a_derive_matching_nothing_creates_no_dataset(cat: Catalog) -> None:
    with pytest.raises(NoChanges, match="'empty' was not created"):
        cat.derive("ds", 1, "labels.class=fish", to_dataset="empty")
    with pytest.raises(DatasetNotFound):
        cat.get_dataset("empty")


def test_a_negative_version_is_no_such_version_not_a_tag(cat: Catalog) -> None:
    """newuser22: ``ds@-1`` answered "invalid tag '-1'", as if a tag had been given."""
    for ref in ("-1", -1):
        with pytest.raises(VersionNotFound, match="versions are numbered 1, 2, 3"):
            cat.resolve("ds", ref)


def test_a_derive_matching_nothing_never_empties_a_dataset(cat: Catalog) -> None:
    """newuser22: a filter with a typo, derived into the dataset itself (or an existing target),
    committed a version of 0 records, the head LabelX commits onto and ``@latest`` reads."""
    cat.derive("ds", 2, "labels.class=dog", to_dataset="dogs")
    for target in (None, "dogs"):
        with pytest.raises(NoChanges, match="never empties"):
            cat.derive("ds", "latest", "labels.clas=dog", to_dataset=target)
    assert (cat.resolve("ds").seq, cat.resolve("dogs").seq) == (2, 1)
    assert keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d"]


def test_derive_into_an_existing_target_asks_may_write(cat: Catalog) -> None:
    cat.create_dataset("theirs", owner="carol")
    seen: list[str] = []

    def refuse(target: Dataset) -> None:
        seen.append(target.name)
        raise AccessDenied(f"no writer role on {target.name!r}", dataset=target.name)

    with pytest.raises(AccessDenied):
        cat.derive("ds", 1, "labels.class=cat", to_dataset="theirs", may_write=refuse)
    assert seen == ["theirs"] and cat.store.head("theirs") == 0


# --- lookups and tokens -----------------------------------------------------------------------------
def test_lookup_records(cat: Catalog) -> None:
    found = cat.lookup_records("ds", 1, ["a", "zz", "c/2"])
    assert sorted(found) == ["a", "c/2"] and found["a"] == rec("a")


def test_tokens(catalog: Catalog) -> None:
    from datahub.catalog import TokenInfo

    store = catalog.store
    if isinstance(store, HttpCatalogStore):
        pytest.skip("tokens are managed on the API server; test_http_store checks the remote refusal")
    assert store.get_token("h1") is None
    store.put_token(TokenInfo("h1", "alice", is_admin=True, created_at=5.0, description="ci"))
    got = store.get_token("h1")
    assert got is not None and (got.principal, got.is_admin, got.created_at) == ("alice", True, 5.0)
    store.put_token(TokenInfo("h0", "zed", created_at=7.0))
    store.put_token(TokenInfo("h2", "alice", created_at=4.0, description="older"))
    listed = [(t.token_hash, t.principal, t.is_admin, t.description) for t in store.list_tokens()]
    assert listed == [("h2", "alice", False, "older"), ("h1", "alice", True, "ci"), ("h0", "zed", False, "")]
    store.delete_token("h1")
    assert store.get_token("h1") is None
    assert [t.token_hash for t in store.list_tokens()] == ["h2", "h0"]


def test_instance_id(catalog: Catalog) -> None:
    """The catalog's instance id, in the dataset browser's cookie names (caller73): 16 hex
    digits, the same on every call."""
    made = catalog.store.instance_id()
    assert re.fullmatch(r"[0-9a-f]{16}", made) and catalog.store.instance_id() == made


def test_browser_sessions(catalog: Catalog) -> None:
    """The dataset browser's sign-ins (caller36): kept by id hash, ended by sign-out, by the
    revoke of their token, and dropped once ended when another is kept."""
    from datahub.catalog import TokenInfo
    from datahub.catalog.model import BrowserSession

    store = catalog.store
    if isinstance(store, HttpCatalogStore):
        with pytest.raises(InvalidInput, match="on the API server"):
            store.get_browser_session("s1")
        return
    store.put_token(TokenInfo("t1", "alice"))
    store.put_token(TokenInfo("t2", "bob"))
    assert store.get_browser_session("s1") is None
    store.put_browser_session(BrowserSession("s1", "t1", 100.0), now=50.0)
    store.put_browser_session(BrowserSession("s2", "t1", 100.0), now=50.0)
    store.put_browser_session(BrowserSession("s3", "t2", 60.0), now=50.0)
    assert store.get_browser_session("s1") == BrowserSession("s1", "t1", 100.0)
    store.delete_browser_session("s1")  # sign-out
    assert store.get_browser_session("s1") is None and store.get_browser_session("s2") is not None
    store.delete_token("t1")  # datahub token revoke
    assert store.get_browser_session("s2") is None and store.get_browser_session("s3") is not None
    store.put_browser_session(BrowserSession("s4", "t2", 200.0), now=70.0)  # s3 ended at 60
    assert store.get_browser_session("s3") is None
    assert store.get_browser_session("s4") == BrowserSession("s4", "t2", 200.0)


def test_open_catalog_urls(tmp_path) -> None:
    from datahub.catalog import open_catalog

    with open_catalog(f"sqlite:///{tmp_path / 'sub' / 'c.db'}") as cat:
        cat.create_dataset("ds")
    with open_catalog(f"sqlite:///{tmp_path / 'sub' / 'c.db'}") as cat:  # persisted in the file
        assert [d.name for d in cat.list_datasets()] == ["ds"]
    with open_catalog("mongomock://localhost/dh") as cat:
        assert cat.list_datasets() == []
    for bad in ["postgres://x/y", "sqlite:///", "catalog.db"]:
        with pytest.raises(InvalidInput, match="catalog URL"):
            open_catalog(bad)


# --- hostile input (issue 12): refused with nothing written, every version stays readable -------
def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def deep_list(depth: int) -> list:
    value: list = [1]
    for _ in range(depth - 1):
        value = [value]
    return value


def assert_unchanged(cat: Catalog) -> None:
    assert cat.store.head("ds") == 2
    for seq in (1, 2):
        list(cat.list_records("ds", seq))
    assert keys(cat.list_records("ds")) == ["b", "c/1", "c/2", "d"]


@pytest.mark.parametrize(
    "change",
    [
        Put(rec("x", meta=nested(33))),
        Put(rec("x", labels=nested(1000))),
        Put(rec("x", labels={"a": deep_list(32)})),  # 33 levels with the mapping
        Put(rec("x", meta={"blob": "x" * (64 * 1024)})),
        Patch("b", labels=nested(300)),
        Patch("b", meta={"blob": "x" * (64 * 1024)}),
    ],
)
def test_over_deep_or_large_meta_and_labels_are_refused(cat: Catalog, change) -> None:
    with pytest.raises(InvalidInput, match="'ds'.*(deeper than 32 levels|over the 65536-byte limit)"):
        cat.commit("ds", [Put(rec("ok")), change])
    assert_unchanged(cat)


def test_meta_at_the_limits_is_accepted(cat: Catalog) -> None:
    deep, big = nested(32), {"blob": "x" * (64 * 1024 - 20)}
    v = cat.commit("ds", [Put(rec("x", meta=deep, labels=big))])
    assert cat.get_record("ds", v.seq, "x").meta == deep and cat.get_record("ds", v.seq, "x").labels == big


@pytest.mark.parametrize("depth", [33, 300])
def test_over_deep_records_already_stored_stay_readable(cat: Catalog, depth: int) -> None:
    """Written before the limits (straight to the store): listed, got and diffed with a marker."""
    raw_store(cat).commit("ds", 2, [Put(rec("deep", meta=nested(depth), labels={"class": "cat"}))])
    marker = {
        "datahub_unreadable": "nested deeper than 32 levels; written before datahub refused such values"
    }
    got = cat.get_record("ds", 3, "deep")
    assert got.meta == marker and got.labels == {"class": "cat"}
    assert [r.meta for r in cat.list_records("ds", 3) if r.key == "deep"] == [marker]
    assert [(e.kind, e.new.meta) for e in cat.diff("ds", 2, 3)] == [("added", marker)]
    assert "deep" in keys(cat.list_records("ds", 3, where="labels.class=cat"))


@pytest.mark.parametrize("tag", ["v3", "v0", "v12345", "latest", "3"])
def test_tags_that_look_like_versions_are_refused(cat: Catalog, tag: str) -> None:
    with pytest.raises(InvalidName, match="version reference"):
        cat.tag("ds", tag, 1)
    assert cat.resolve("ds", "v2").seq == 2 and cat.resolve("ds", 1).tags == ()


def test_a_version_like_tag_stored_before_the_rule_can_be_deleted(cat: Catalog) -> None:
    raw_store(cat).set_tag("ds", "v2", 1)  # as an older datahub allowed
    assert cat.resolve("ds", "v2").seq == 2  # a version reference always wins
    cat.untag("ds", "v2")
    assert cat.resolve("ds", 1).tags == ()


@pytest.mark.parametrize("ref", [2**63, 2**70, "99999999999999999999", "v99999999999999999999", -1, 2**53])
def test_huge_version_refs_are_not_found(cat: Catalog, ref) -> None:
    with pytest.raises(VersionNotFound, match="'ds'"):
        cat.resolve("ds", ref)
    with pytest.raises(VersionNotFound):
        list(cat.diff("ds", ref, 2))


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (rec("x", size=2**70), "invalid size"),
        (rec("x", size=2**62 + 1), "invalid size"),
        (rec("x", etag=""), "empty etag"),
        (rec("x", etag="  "), "empty etag"),
    ],
)
def test_bad_record_fields_are_refused(cat: Catalog, record, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        cat.commit("ds", [Put(record)])
    assert_unchanged(cat)


@pytest.mark.parametrize("url", ["ftp://host/x", "http://host/x", "gopher://h/x", "nourl", "s3:/b/x"])
def test_record_urls_no_reader_supports_are_refused(cat: Catalog, url: str) -> None:
    record = rec("x")
    with pytest.raises(InvalidInput, match="unsupported object url"):
        cat.commit("ds", [Put(type(record)("x", url, "e", 1))])
    assert_unchanged(cat)


def test_base_beyond_64_bits_is_refused(cat: Catalog) -> None:
    with pytest.raises(InvalidInput, match="invalid base version"):
        cat.commit("ds", [Put(rec("x"))], base=2**70)
    assert_unchanged(cat)


@pytest.mark.parametrize("spec", ["size>abc", "size=abc", 'size<="10"', "labels.score>high", "meta.n<x"])
def test_numeric_comparisons_need_numbers(cat: Catalog, spec: str) -> None:
    with pytest.raises(InvalidInput, match="needs a number"):
        list(cat.list_records("ds", where=spec))


@pytest.mark.parametrize("owner", ["", "  "])
def test_an_empty_owner_is_refused(cat: Catalog, owner: str) -> None:
    before = cat.get_dataset("ds")
    with pytest.raises(InvalidInput, match="invalid owner"):
        cat.update_dataset("ds", owner=owner)
    assert cat.get_dataset("ds") == before
