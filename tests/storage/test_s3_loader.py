"""S3 connections share the process's parsed SDK models but nothing else: each has its own
credentials, and the shared loader does not grow with every connection opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.errors import InvalidInput
from datahub.storage.s3 import S3Connection, S3Store
from tests.storage.conftest import make_config


def _config(tmp_path: Path, key: str):
    config = make_config(tmp_path).s3
    config.endpoint_url, config.access_key_id, config.secret_access_key = "http://127.0.0.1:9", key, "s"
    return config


def test_connections_share_parsed_models_and_keep_their_own_credentials(tmp_path: Path) -> None:
    first, second = S3Connection(_config(tmp_path, "key-a")), S3Connection(_config(tmp_path, "key-b"))
    loader = first._session._session.get_component("data_loader")
    assert second._session._session.get_component("data_loader") is loader
    assert first.client.meta.service_model.service_name == "s3"
    paths = list(loader.search_paths)
    for _ in range(3):
        S3Connection(_config(tmp_path, "key-c"))
    assert list(loader.search_paths) == paths
    assert len(set(paths)) == len(paths)
    assert first.credentials().get_frozen_credentials().access_key == "key-a"
    assert second.credentials().get_frozen_credentials().access_key == "key-b"


def test_reads_and_small_writes_make_no_sdk_client_until_a_call_needs_one(
    tmp_path: Path, moto_endpoint, monkeypatch
) -> None:
    """The first S3 client of a process parses the SDK's S3 model (~0.1 CPU-s): a store with an
    endpoint URL makes it on the first call the lean path cannot take (here a listing), once,
    so a read-only mount daemon never pays it. Fails on the base: the client was made at open."""
    import boto3

    bucket = moto_endpoint.new_bucket("lazy")
    made: list[str] = []
    real = boto3.session.Session.client
    monkeypatch.setattr(
        boto3.session.Session, "client", lambda self, *a, **k: made.append(a[0]) or real(self, *a, **k)
    )
    store = S3Store(bucket, "p", make_config(tmp_path, moto_endpoint).s3)
    try:
        info = store.put("a/b.bin", b"x" * 1000)
        assert store.read("a/b.bin", etag=info.etag) == b"x" * 1000
        assert store.read("a/b.bin", 10, 20) == b"x" * 10
        assert store.identity() == f"{moto_endpoint.url} s3://{bucket}/p"
        assert made == []
        assert [o.key for o in store.list("a/")] == ["a/b.bin"]
        assert [o.key for o in store.list("")] == ["a/b.bin"]
        assert made == ["s3"]
    finally:
        store.close()


def test_a_bad_endpoint_or_region_is_still_the_openers_error(tmp_path: Path) -> None:
    for field, value in (("endpoint_url", "127.0.0.1:9000"), ("region", "not a region")):
        config = _config(tmp_path, "k")
        setattr(config, field, value)
        with pytest.raises(InvalidInput, match="invalid S3 configuration"):
            S3Connection(config)
