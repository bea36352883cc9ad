"""A batch of puts checked by column (``batch_checks.plain_puts``) answers as the per-change
checks do, and the rows a batch writes are the rows the per-record path wrote (issue 38 item 3).

The batch path may only skip work: for every odd or bad change placed among plain ones it
must hand the batch to the per-change checks, so the commit is refused with the same error,
naming the change's number and key, and nothing is written.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from datahub.catalog import Catalog, Delete, Put, Record
from datahub.catalog.batch_checks import plain_puts
from datahub.catalog.catalog import _check_change
from datahub.catalog.model import EMPTY
from datahub.catalog.sqlite_schema import dump_json, dump_json_column
from datahub.errors import InvalidInput, InvalidKey
from datahub.validation import MAX_JSON_BYTES, Unreadable

from .conftest import make_store


def _plain(i: int, **fields: object) -> Record:
    key = f"train/{i // 10:03d}/{i:06d}.jpg"
    return Record(key, f"s3://bucket/data/{key}", f"etag{i}", 1000 + i, **fields)  # type: ignore[arg-type]


def _deep(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


class _Mapping(dict):
    """A dict subclass: not a plain dict, so the per-change checks decide."""


# Records the per-change checks refuse: bad keys, URLs, etags, sizes, meta and labels.
BAD = [
    Record("a/../b", "s3://b/k", "e", 1),
    Record("/abs", "s3://b/k", "e", 1),
    Record("a//b", "s3://b/k", "e", 1),
    Record("a/\x00b", "s3://b/k", "e", 1),
    Record("a/\u202eb", "s3://b/k", "e", 1),
    Record("a/" + "x" * 256, "s3://b/k", "e", 1),
    Record("d/" + "z" * 1023, "s3://b/k", "e", 1),
    Record("a/.datahub-hint-x", "s3://b/k", "e", 1),
    Record("", "s3://b/k", "e", 1),
    Record("k", "s3://b/", "e", 1),
    Record("k", "gopher://b/k", "e", 1),
    Record("k", "s3://b/k", "", 1),
    Record("k", "s3://b/k", "   ", 1),
    Record("k", "s3://b/k", "e", -1),
    Record("k", "s3://b/k", "e", 2**64),
    Record("k", "s3://b/k", "e", True),
    Record("k", "s3://b/k", "e", "5"),  # type: ignore[arg-type]
    Record("k", "s3://b/k", "e", 1, meta={"a": float("nan")}),
    Record("k", "s3://b/k", "e", 1, meta={"datahub_unreadable": "x"}),
    Record("k", "s3://b/k", "e", 1, meta=_deep(40)),
    Record("k", "s3://b/k", "e", 1, meta={"a": "x" * (MAX_JSON_BYTES + 1)}),
    Record("k", "s3://b/k", "e", 1, meta={"a": object()}),
    Record("k", "s3://b/k", "e", 1, labels=["not", "a", "mapping"]),  # type: ignore[arg-type]
    Record("k", "s3://b/k", "e", 1, labels={"a": float("inf")}),
]

# Records the per-change checks accept, but that are not all plain: the batch may or may not
# take them, the answer must be the same.
ODD_GOOD = [
    Record("é/k", "s3://b/k", "e", 1),
    Record("k", "s3://b/a%20b", "e", 1),
    Record("k", "s3://b/a%ZZ", "e", 1),
    Record("k", "file:///tmp/x", "e", 1),
    Record("k", "s3://b/k", "e", 0, meta=_deep(32)),
    Record("k", "s3://b/k", "e", 1, meta={"a": "x" * (MAX_JSON_BYTES - 10)}),
    Record("k", "s3://b/k", "e", 1, meta={"a": "}{,[]"}),
    Record("k", "s3://b/k", "e", 1, meta=_Mapping(a=1)),
    Record("k", "s3://b/k", "e", 1, labels={"a": [1, {"b": None}]}),
    Record("k", "s3://b/k", "e", 1, checksum="sha256:00"),
]


def _per_change_accepts(batch: list) -> bool:
    try:
        for n, change in enumerate(batch, 1):
            _check_change("d", n, change)
        return True
    except InvalidInput:
        return False


@pytest.mark.parametrize("odd", BAD + ODD_GOOD, ids=range(len(BAD + ODD_GOOD)))
def test_a_batch_is_taken_whole_only_when_every_change_passes_its_checks(odd: Record) -> None:
    for where in (0, 5, 9):
        batch: list = [Put(_plain(i)) for i in range(10)]
        batch[where] = Put(odd)
        if plain_puts(batch) is not None:
            assert _per_change_accepts(batch), (odd, where)
        if odd in BAD:
            assert plain_puts(batch) is None
            assert not _per_change_accepts(batch)


def test_plain_batches_are_taken_whole() -> None:
    rng = random.Random(38)
    metas = [EMPTY, {}, {"split": "train"}, {"w": 3, "h": 4.5, "ok": True, "n": None, "s": "é"}]
    batch = [Put(_plain(i, meta=rng.choice(metas), labels=rng.choice(metas))) for i in range(500)]
    assert plain_puts(batch) == [c.record for c in batch]
    assert _per_change_accepts(batch)
    assert plain_puts([*batch, Delete("train/000/000000.jpg")]) is None  # a delete: change by change


@pytest.mark.parametrize("odd", BAD, ids=range(len(BAD)))
def test_a_bad_change_in_a_batch_is_named_and_nothing_is_written(tmp_path: Path, odd: Record) -> None:
    catalog = Catalog(make_store("sqlite", tmp_path, batch_size=4))
    catalog.create_dataset("d")
    changes = [Put(_plain(i)) for i in range(6)] + [Put(odd)] + [Put(_plain(i)) for i in range(6, 9)]
    with pytest.raises(InvalidInput) as caught:
        catalog.commit("d", changes)
    # a bad key is refused by check_new_key's own error (as before), the rest name the change
    assert isinstance(caught.value, InvalidKey) or "change 7 for dataset 'd'" in caught.value.message
    assert catalog.store.head("d") == 0
    catalog.store.close()


def test_json_column_writes_what_dump_json_writes() -> None:
    unreadable = Unreadable('{"a":' * 40 + "1" + "}" * 40)
    values = [
        {"b": 1, "a": "x"},
        EMPTY,
        None,
        {"a": "}{"},
        {"z": {"y": [1]}},
        {"k": "\u2028é"},
        {},
        {"q": "},{"},
    ]
    for column in ([*values], [{"split": "train"}] * 5, [EMPTY] * 3, [*values, unreadable], values[:2]):
        assert dump_json_column(column) == [dump_json(v) for v in column]


def test_a_first_version_of_puts_stores_what_the_general_path_stores(tmp_path: Path) -> None:
    """Batches of puts in key order (planned whole) against the same records planned key by key."""
    records = [_plain(i, meta={"i": i} if i % 3 else EMPTY, labels={"c": "cat"} if i % 5 == 0 else EMPTY) for i in range(50)]  # fmt: skip
    fast = Catalog(make_store("sqlite", tmp_path / "a", batch_size=7))
    slow = Catalog(make_store("sqlite", tmp_path / "b", batch_size=7))
    for c in (fast, slow):
        c.create_dataset("d")
    v_fast = fast.commit("d", [Put(r) for r in records])
    # a first batch with a key above all others makes every later batch take the general path
    v_slow = slow.commit(
        "d", [Put(Record("zzz", "s3://b/z", "e", 1))] * 7 + [Put(r) for r in records] + [Delete("zzz")]
    )
    assert list(fast.list_records("d", 1)) == list(slow.list_records("d", 1)) == records
    assert (v_fast.record_count, v_fast.total_bytes, v_fast.added) == (
        v_slow.record_count,
        v_slow.total_bytes,
        50,
    )
    fast.store.close()
    slow.store.close()


def _mixed_on_a_head(tmp_path: Path, odd: Record | None) -> tuple[Catalog, list]:
    """A head of 20 plain records, and a change set of puts with deletes among them (what a
    bucket snapshot's merge commits), ``odd`` put as change 8 when given."""
    catalog = Catalog(make_store("sqlite", tmp_path, batch_size=4))
    catalog.create_dataset("d")
    catalog.commit("d", [Put(_plain(i)) for i in range(20)])
    changes: list = []
    for i in range(20, 40):
        changes.append(Put(_plain(i)))
        if i % 5 == 0:
            changes.append(Delete(_plain(i - 20).key))
    if odd is not None:
        changes[7] = Put(odd)
    return catalog, changes


def test_the_puts_among_deletes_are_checked_by_column(tmp_path: Path, monkeypatch) -> None:
    """Only the deletes go one by one; the puts of the chunk by the column passes."""
    import datahub.catalog.catalog as catalog_module

    catalog, changes = _mixed_on_a_head(tmp_path, None)
    checked: list = []
    real = catalog_module._check_change
    monkeypatch.setattr(catalog_module, "_check_change", lambda d, n, c: (checked.append(c), real(d, n, c)))
    version = catalog.commit("d", changes)
    assert checked == [c for c in changes if isinstance(c, Delete)]
    assert (version.added, version.removed, version.record_count) == (20, 4, 36)
    catalog.store.close()


@pytest.mark.parametrize("odd", BAD, ids=range(len(BAD)))
def test_a_bad_put_among_deletes_is_named_and_nothing_is_written(tmp_path: Path, odd: Record) -> None:
    catalog, changes = _mixed_on_a_head(tmp_path, odd)
    with pytest.raises(InvalidInput) as caught:
        catalog.commit("d", changes)
    assert isinstance(caught.value, InvalidKey) or "change 8 for dataset 'd'" in caught.value.message
    assert catalog.store.head("d") == 1
    catalog.store.close()
