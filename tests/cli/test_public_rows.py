"""The CLI prints a dataset, a version, a record and a diff entry exactly as the API shows them.

``datahub ls --json``, ``log``, ``diff --json``, ``commit``, ``tag``, ``derive``, ``export``
and ``dataset list`` print ``datahub.catalog.public``'s rows, no longer the API's pydantic
models dumped to JSON (suite36: building those models was 12 % of a small ``datahub ls``'s CPU).
These tests hold each row equal to the model's ``model_dump(mode="json")`` for the values a
catalog holds, and the API's ``*_public`` equal to the same row.
"""

from __future__ import annotations

import pytest

from datahub.api import schemas
from datahub.catalog import public
from datahub.catalog.model import Dataset, DiffEntry, Record, Version

RECORDS = [
    Record("a.jpg", "s3://b/a.jpg", "e1", 10),
    Record(
        "dir/b.txt",
        "file:///data/b.txt",
        '"etag-2"',
        0,
        checksum="sha256:" + "0" * 64,
        meta={"mtime": 1.5, "tags": ["x", "y"], "nested": {"k": [1, {"deep": None}]}},
        labels={"class": "cat", "score": 0.25, "ok": True, "n": 3},
    ),
]
VERSIONS = [
    Version("pets", 1, None),
    Version(
        "pets",
        7,
        6,
        message="relabel",
        author="alice",
        created_at=1700000000,
        tags=("gold", "v7"),
        record_count=3,
        total_bytes=30,
        added=1,
        removed=2,
        modified=3,
        lineage={"from": ["pets@6"], "n": 1},
    ),  # fmt: skip
]
DATASETS = [
    Dataset("pets"),
    Dataset(
        "faces",
        description="d",
        source="s3://b/faces/",
        owner="alice",
        acl={"bob": "reader", "*": "reader"},
        created_at=17,
        revision=4,
        sources=("s3://b/", "s3://c/x/"),
    ),  # fmt: skip
]
DIFFS = [
    DiffEntry("added", "a.jpg", None, RECORDS[0]),
    DiffEntry("removed", "a.jpg", RECORDS[0], None),
    DiffEntry("modified", "dir/b.txt", RECORDS[0], RECORDS[1]),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.key)
def test_a_record_row_is_the_api_record(record: Record) -> None:
    row = public.record_row(record)
    assert row == schemas.RecordPublic(**row).model_dump(mode="json")
    assert schemas.record_public(record).model_dump(mode="json") == row
    assert list(row) == list(schemas.RecordPublic.model_fields)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"v{v.seq}")
def test_a_version_row_is_the_api_version(version: Version) -> None:
    row = public.version_row(version)
    assert schemas.version_public(version).model_dump(mode="json") == row
    assert list(row) == list(schemas.VersionPublic.model_fields)
    assert type(row["created_at"]) is float  # the model's field is a float: 1700000000.0 in JSON


@pytest.mark.parametrize("dataset", DATASETS, ids=lambda d: d.name)
def test_a_dataset_row_is_the_api_dataset(dataset: Dataset) -> None:
    row = public.dataset_row(dataset, 5)
    assert schemas.dataset_public(dataset, 5).model_dump(mode="json") == row
    assert list(row) == list(schemas.DatasetPublic.model_fields)
    assert type(row["created_at"]) is float


@pytest.mark.parametrize("entry", DIFFS, ids=lambda e: e.kind)
def test_a_diff_row_is_the_api_diff_entry(entry: DiffEntry) -> None:
    row = public.diff_row(entry)
    assert schemas.diff_public(entry).model_dump(mode="json") == row
    assert list(row) == list(schemas.DiffEntryPublic.model_fields)
