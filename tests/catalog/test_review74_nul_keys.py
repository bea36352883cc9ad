"""review74: a key holding a NUL character in a record's ``meta`` / ``labels`` was a version on
SQLite and a bare ``InvalidDocument`` on MongoDB ("this is a datahub bug": its field names cannot
hold one), as an integer beyond 64 bits was before review73. Every store refuses it alike now,
naming the record and the key; a NUL inside a value is kept everywhere.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Patch, Put
from tests.catalog.conftest import rec
from tests.catalog.test_review73_big_ints import refused_alike


def test_a_nul_inside_a_value_is_kept_on_every_store(catalog: Catalog) -> None:
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("a", labels={"text": "a\x00b"}, meta={"k": ["\x00"]}))])
    (record,) = catalog.list_records("ds")
    assert (record.labels, record.meta) == ({"text": "a\x00b"}, {"k": ["\x00"]})


@pytest.mark.parametrize(
    "change",
    [
        Put(rec("a", labels={"a\x00b": 1})),
        Put(rec("a", meta={"deep": [{"x\x00": 1}]})),
        Patch("plain", labels={"\x00": "cat"}),
    ],
    ids=["labels", "nested-meta", "patch"],
)
def test_a_key_holding_a_nul_is_refused_alike_on_every_store(catalog: Catalog, change) -> None:
    refused_alike(catalog, change, "NUL character", "rename it")
