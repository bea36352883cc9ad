"""review73: an integer beyond 64 bits in ``meta`` / ``labels`` was a version on SQLite and a bare
``OverflowError`` on MongoDB (BSON holds signed 64-bit integers only).

The same commit (a manifest whose records carry a 64-bit unsigned hash, a LabelX label) then
depended on the store: "this is a datahub bug" on MongoDB, and a catalog could not be copied
from SQLite to MongoDB. Every store refuses it alike now (InvalidInput naming the record and
the value, nothing committed); the bounds themselves commit and read back exactly everywhere.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Patch, Put
from datahub.errors import InvalidInput
from tests.catalog.conftest import rec

LOW, HIGH = -(2**63), 2**63 - 1


def test_the_64_bit_bounds_commit_and_read_back_on_every_store(catalog: Catalog) -> None:
    catalog.create_dataset("ds")
    records = [
        rec("a", labels={"hash": HIGH}, meta={"ids": [LOW, HIGH], "f": 1.8446744073709552e19}),
        rec("b", labels={"text": "18446744073709551615"}),  # a string of 20 digits is a string
    ]
    catalog.commit("ds", [Put(r) for r in records])
    assert {r.key: (r.labels, r.meta) for r in catalog.list_records("ds")} == {
        r.key: (r.labels, r.meta) for r in records
    }


@pytest.mark.parametrize(
    "change",
    [
        Put(rec("a", labels={"hash": 2**64 - 1})),
        Put(rec("a", meta={"deep": {"ids": [1, HIGH + 1]}})),
        Put(rec("a", labels={"n": LOW - 1})),
        Patch("plain", labels={"hash": 10**30}),
    ],
    ids=["labels", "nested-meta", "below", "patch"],
)
def test_an_integer_beyond_64_bits_is_refused_alike_on_every_store(catalog: Catalog, change) -> None:
    refused_alike(catalog, change, "beyond the signed 64-bit range", "write it as a string")


def refused_alike(catalog: Catalog, change: Put | Patch, *said_parts: str) -> None:
    """``change`` after a batch of plain puts is refused (InvalidInput naming its record and
    saying each of ``said_parts``) with nothing committed: the same on every store."""
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("plain"))])
    many = [Put(rec(f"k{i:04d}", labels={"i": i})) for i in range(50)]  # a batch of plain puts
    with pytest.raises(InvalidInput) as refused:
        catalog.commit("ds", [*many, change])
    said = refused.value.message
    assert all(part in said for part in said_parts), said
    assert repr(change.key if isinstance(change, Patch) else change.record.key) in said, said
    assert catalog.store.head("ds") == 1  # nothing committed
