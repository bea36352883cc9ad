"""review36: a LIST page that says it is truncated but gives no continuation token fails the
listing (and so the import): it ended the listing there, and the import committed a version
missing every key after that page (a re-import removed them from the head)."""

from __future__ import annotations

import pytest

from datahub.config import load_config
from datahub.errors import StorageError
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
