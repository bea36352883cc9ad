"""review36: imports of an S3 prefix.

- A LIST page that says it is truncated but gives no continuation token fails the listing
  (and so the import): it ended the listing there, and the import committed a version
  missing every key after that page (a re-import removed them from the head).
- The prefix's own folder marker (``train/``, as the S3 console's "Create folder" makes it)
  is skipped like every other marker: its key below the prefix is empty, and the import of
  ``s3://bucket/train`` failed whole with "a record key must be a non-empty relative path"."""

from __future__ import annotations

import pytest

from datahub.config import load_config
from datahub.errors import InvalidInput, StorageError
from datahub.ingest import import_source
from datahub.storage import open_store
from datahub.storage.s3 import S3Store

KEYS = [f"ds/{d}/{i}.bin" for d in "abc" for i in range(5)]


class _TokenlessPages:
    """A boto3 client whose ListObjectsV2 pages hold 2 entries and never carry the token."""

    def __init__(self, client) -> None:
        self._client = client

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def list_objects_v2(self, **params):
        page = self._client.list_objects_v2(**{**params, "MaxKeys": 2})
        page.pop("NextContinuationToken", None)
        return page


@pytest.fixture
def bucket(tmp_path, moto_endpoint, monkeypatch):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    config.home_path.mkdir(parents=True)
    name = moto_endpoint.new_bucket("tokenless")
    client = moto_endpoint.client()
    for key in KEYS:
        client.put_object(Bucket=name, Key=key, Body=key.encode())
    real = S3Store._client
    monkeypatch.setattr(S3Store, "_client", property(lambda self: _TokenlessPages(real.fget(self))))
    return config, name


def test_a_truncated_page_without_a_token_fails_the_listing(bucket) -> None:
    config, name = bucket
    store = open_store(f"s3://{name}/ds", config)
    try:
        with pytest.raises(StorageError, match="continuation token"):
            list(store.list())
        with pytest.raises(StorageError, match="continuation token"):
            list(store.list_dir("a/"))
    finally:
        store.close()


def test_an_import_over_such_a_listing_commits_nothing(bucket, catalog, stores) -> None:
    config, name = bucket
    with pytest.raises(StorageError, match="continuation token"):
        import_source(catalog, config, stores, f"s3://{name}/ds", "ds")
    assert [d.name for d in catalog.list_datasets()] == []


@pytest.fixture
def marked(tmp_path, moto_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    config.home_path.mkdir(parents=True)
    name = moto_endpoint.new_bucket("marked")
    client = moto_endpoint.client()
    for key, body in [("train/", b""), ("train/a/", b""), ("train/a/1.jpg", b"1"), ("train/b.jpg", b"2")]:
        client.put_object(Bucket=name, Key=key, Body=body)
    return config, name, client


@pytest.mark.parametrize("root", ["train", "train/"])
def test_the_prefix_s_own_folder_marker_is_skipped(marked, catalog, stores, root) -> None:
    config, name, _ = marked
    report = import_source(catalog, config, stores, f"s3://{name}/{root}", "ds")
    assert report.added == 2
    assert [r.key for r in catalog.list_records("ds")] == ["a/1.jpg", "b.jpg"]


def test_an_object_named_as_the_prefix_with_bytes_is_refused_by_name(marked, catalog, stores) -> None:
    """Bytes under the prefix's own name can be no record (its key would be empty): the import
    says which object and what to do, and commits nothing."""
    config, name, client = marked
    client.put_object(Bucket=name, Key="train/", Body=b"not a marker")
    with pytest.raises(InvalidInput, match=rf"s3://{name}/train/.*12 bytes"):
        import_source(catalog, config, stores, f"s3://{name}/train", "ds")
    assert [d.name for d in catalog.list_datasets()] == []
