"""Meta stored before the depth limit (issue 24 item 5), on every store: a labels-only patch or a
derive carries the over-deep field over exactly as stored, never the ``datahub_unreadable``
marker read paths show for it; a change that would merge into it is refused, naming it.

The legacy record goes straight into the store, as an older datahub would have written it."""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog
from datahub.catalog.model import Patch, Put
from datahub.errors import InvalidInput
from datahub.validation import UNREADABLE, Unreadable
from tests.catalog.conftest import raw_store, rec


def nested(depth: int) -> dict:
    value: dict = {"leaf": "x"}
    for i in range(depth - 1):
        value = {f"n{i % 3}": value}
    return value


DEEP = nested(40)


@pytest.fixture
def legacy(catalog: Catalog) -> Catalog:
    catalog.create_dataset("ds")
    raw_store(catalog).commit(
        "ds", 0, [Put(rec("deep.jpg", meta=DEEP, labels={"class": "cat"})), Put(rec("b"))]
    )
    return catalog


def stored(catalog: Catalog, dataset: str, seq: int):
    """The meta of deep.jpg as the store holds it (the raw store's, behind a remote one)."""
    meta = raw_store(catalog).get_record(dataset, seq, "deep.jpg").meta
    assert isinstance(meta, Unreadable) and set(meta) == {UNREADABLE}
    return meta.stored


def test_a_labels_only_patch_carries_the_deep_meta_over_as_stored(legacy: Catalog):
    before = stored(legacy, "ds", 1)
    legacy.commit("ds", [Patch("deep.jpg", labels={"class": "dog"})])
    after = stored(legacy, "ds", 2)
    assert after == before and type(after) is type(before)  # SQLite: the same text, byte for byte
    assert legacy.get_record("ds", 2, "deep.jpg").labels == {"class": "dog"}


def test_a_patch_of_the_deep_field_itself_is_refused_and_writes_nothing(legacy: Catalog):
    with pytest.raises(InvalidInput, match="cannot patch the meta of record 'deep.jpg' in dataset 'ds'"):
        legacy.commit("ds", [Patch("deep.jpg", meta={"split": "train"})])
    assert legacy.store.head("ds") == 1


def test_a_derive_carries_the_deep_meta_over_or_is_refused(legacy: Catalog, store_kind):
    before = stored(legacy, "ds", 1)
    if store_kind == "http":
        # The client sees only the marker: it cannot carry the stored value, so it must not
        # write the marker in its place.
        with pytest.raises(InvalidInput, match="datahub_unreadable"):
            legacy.derive("ds", 1, "labels.class=cat", to_dataset="ds2")
        # (the target it created first stays, empty: stores have no dataset removal yet)
        assert "ds2" not in {d.name for d in legacy.list_datasets()} or legacy.store.head("ds2") == 0
        return
    legacy.derive("ds", 1, "labels.class=cat", to_dataset="ds2")
    assert stored(legacy, "ds2", 1) == before


def test_the_marker_itself_cannot_be_written_as_a_value(legacy: Catalog):
    marker = dict(legacy.get_record("ds", 1, "deep.jpg").meta)
    with pytest.raises(InvalidInput, match="datahub_unreadable"):
        legacy.commit("ds", [Put(rec("copy.jpg", meta=marker))])
    assert legacy.store.head("ds") == 1
