"""The large-commit paths of issue 38 item 3 decide exactly as the general ones do.

A first version's key-ordered batches skip the planner's lookups, keys and s3:// URLs are
accepted by one C regex in the common case, meta/labels go through a prebuilt C encoder, and
the diff indexes leave out version 1 (SQLite, MongoDB) and open revisions (MongoDB). Each
test compares the fast path with the full one, or checks the stored layout those queries
rely on.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from datahub import validation
from datahub.catalog import Catalog, Delete, Patch, Put, open_catalog
from datahub.catalog.revisions import OPEN
from datahub.catalog.sqlite_schema import dump_json
from datahub.errors import InvalidInput, RecordNotFound
from datahub.storage import check_record_fields

from .conftest import make_store, rec

_ALPHABET = "ab./-_ ~\x00\x1f\u200b\u202eé0" + "/" * 3


def _random_keys(n: int) -> list[str]:
    rng = random.Random(38)
    keys = ["a", "a/b", "a b/c.jpg", ".a", "a/.b", "a/..", "a//b", "/a", "a/", "x" * 255, "y" * 256,
            "d/" + "z" * 1022, "d/" + "z" * 1023, ".datahub-hint-x", "a/.datahub-hint-y"]  # fmt: skip
    keys += ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 12))) for _ in range(n)]
    return keys


def _full_check(fn, value, monkeypatch: pytest.MonkeyPatch, module, name: str) -> bool:
    """Whether ``fn(value)`` accepts with the fast regex ``module.name`` switched off."""
    with monkeypatch.context() as m:
        m.setattr(module, name, __import__("re").compile("(?!)"))
        try:
            fn(value)
            return True
        except InvalidInput:
            return False


def test_plain_key_regex_accepts_only_what_the_full_checks_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in _random_keys(3000):
        if validation.PLAIN_KEY.fullmatch(key) and len(key) <= validation.MAX_KEY_BYTES:
            assert _full_check(validation.check_new_key, key, monkeypatch, validation, "PLAIN_KEY"), key
        fast = _accepts(validation.check_new_key, key)
        assert fast == _full_check(validation.check_new_key, key, monkeypatch, validation, "PLAIN_KEY"), key


def _accepts(fn, value) -> bool:
    try:
        fn(value)
        return True
    except InvalidInput:
        return False


def test_plain_s3_url_regex_accepts_only_what_the_full_checks_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    import datahub.storage as storage

    urls = ["s3://b/k", "S3://b/a/b.jpg", "s3://b/k/", "s3://b/", "s3:///k", "s3://b//k", "s3://b/a%2Fb",
            "s3://b/a?x", "s3://b/" + "k" * 1024, "s3://b/" + "k" * 1025, "s3://" + "b" * 64 + "/k",
            "s3://b/a b", "ftp://b/k", "s3://b/\x00"]  # fmt: skip
    for url in urls:

        def check(u: str) -> None:
            check_record_fields(u, "etag", 1, "k")

        assert _accepts(check, url) == _full_check(check, url, monkeypatch, storage, "PLAIN_S3"), url


def test_dump_json_writes_what_json_dumps_writes() -> None:
    values = [{"b": 1, "a": [1, 2.5, {"z": None, "y": "é\u2028\x00"}], "c": True, "d": 1e100, "e": -0.0},
              {"x": {"y": {"z": []}}}, {"k": "\ud800"}, {"big": 2**70, "f": float("inf")}]  # fmt: skip
    for value in values:
        assert dump_json(value) == json.dumps(value, separators=(",", ":"), sort_keys=True)
    assert dump_json({}) is None


def test_json_field_check_refuses_what_it_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    cyclic: dict = {}
    cyclic["self"] = cyclic
    deep: dict = {}
    for _ in range(40):
        deep = {"a": deep}
    for bad in (
        {"a": float("nan")},
        {"a": object()},
        cyclic,
        deep,
        {"a": "x" * (validation.MAX_JSON_BYTES + 1)},
    ):
        with pytest.raises(InvalidInput):
            validation.check_json_field(bad, "meta", "k")
    validation.check_json_field({"a": [1, {"b": "c"}]}, "meta", "k")


def _changes(seed: int) -> list:
    """A first version's change set in key order with repeats, deletes and patches of keys put
    earlier (in this batch or an earlier one), crossing batch boundaries."""
    rng = random.Random(seed)
    out: list = []
    for i in range(60):
        key = f"k/{i:03d}"
        out.append(Put(rec(key, etag=f"e{i}", size=i)))
        r = rng.random()
        if r < 0.2:
            out.append(Put(rec(key, etag=f"again{i}", size=i + 1)))
        elif r < 0.35:
            out.append(Delete(key))
        elif r < 0.5:
            out.append(Patch(key, labels={"class": "cat"}))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_first_version_in_key_order_stores_what_the_general_path_stores(tmp_path: Path, seed: int) -> None:
    changes = _changes(seed)
    fast = Catalog(make_store("sqlite", tmp_path / "a", batch_size=7))
    slow = Catalog(make_store("sqlite", tmp_path / "b", batch_size=7))
    fast.create_dataset("d")
    slow.create_dataset("d")
    v_fast = fast.commit("d", changes)
    # the general path: a first batch (7 changes) of a key above all others, deleted at the end,
    # so every later batch has keys below the highest one seen and is looked up
    slow_changes = [Put(rec("zzz"))] * 7 + changes + [Delete("zzz")]
    v_slow = slow.commit("d", slow_changes)
    assert list(fast.list_records("d", 1)) == list(slow.list_records("d", 1))
    assert (v_fast.record_count, v_fast.total_bytes, v_fast.added) == (
        v_slow.record_count,
        v_slow.total_bytes,
        v_slow.added,
    )
    fast.store.close()
    slow.store.close()


def test_a_first_version_refuses_a_delete_of_a_key_it_never_put(tmp_path: Path) -> None:
    catalog = Catalog(make_store("sqlite", tmp_path, batch_size=2))
    catalog.create_dataset("d")
    with pytest.raises(RecordNotFound):
        catalog.commit("d", [Put(rec("a")), Put(rec("b")), Put(rec("c")), Delete("d")])
    with pytest.raises(RecordNotFound):
        catalog.commit("d", [Put(rec("a")), Patch("b", labels={"x": 1})])
    assert catalog.store.head("d") == 0
    catalog.store.close()


def test_sqlite_began_index_leaves_out_version_one(tmp_path: Path) -> None:
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    catalog.create_dataset("d")
    catalog.commit("d", [Put(rec(f"k{i}")) for i in range(5)])
    catalog.commit("d", [Put(rec("k1", etag="e2")), Put(rec("k9"))])
    catalog.close()
    with sqlite3.connect(tmp_path / "c.db") as conn:
        in_index = conn.execute(
            "SELECT count(*) FROM records INDEXED BY records_began WHERE dataset_id = 1 AND from_seq > 1"
        ).fetchone()[0]
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'records_began'").fetchone()[0]
    assert in_index == 2 and "WHERE from_seq > 1" in sql
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    assert [e.key for e in catalog.diff("d", 0, 2)] == ["k0", "k1", "k2", "k3", "k4", "k9"]
    assert [(e.kind, e.key) for e in catalog.diff("d", 1, 2)] == [("modified", "k1"), ("added", "k9")]
    catalog.close()


def test_mongo_diff_indexes_are_partial(tmp_path: Path) -> None:
    store = make_store("mongomock", tmp_path)
    indexes = store.records.index_information()
    assert indexes["began"]["partialFilterExpression"] == {"from_seq": {"$gt": 1}}
    assert indexes["ended"]["partialFilterExpression"] == {"to_seq": {"$lt": OPEN}}
    assert indexes["by_key"]["unique"]
    catalog = Catalog(store)
    catalog.create_dataset("d")
    catalog.commit("d", [Put(rec("a")), Put(rec("b"))])
    catalog.commit("d", [Delete("a"), Put(rec("c"))])
    assert [(e.kind, e.key) for e in catalog.diff("d", 0, 2)] == [("added", "b"), ("added", "c")]
    assert [(e.kind, e.key) for e in catalog.diff("d", 1, 2)] == [("removed", "a"), ("added", "c")]


def test_mongo_keeps_the_full_indexes_of_an_older_database(tmp_path: Path) -> None:
    """A database whose ``began``/``ended`` are full indexes opens without an index conflict."""
    store = make_store("mongomock", tmp_path)
    store.records.drop_index("began")
    store.records.create_index([("dataset", 1), ("from_seq", 1), ("key", 1)], name="began")
    from datahub.catalog.mongo_schema import create_indexes

    create_indexes(store.records.database)
    assert "partialFilterExpression" not in store.records.index_information()["began"]
