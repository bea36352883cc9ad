"""S3 connections share the process's parsed SDK models but nothing else: each has its own
credentials, and the shared loader does not grow with every connection opened."""

from __future__ import annotations

from pathlib import Path

from datahub.storage.s3 import S3Connection
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
