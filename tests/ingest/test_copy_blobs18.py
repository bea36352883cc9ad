"""blobverify18: a ``--copy`` import stores its blobs as a commit does (``store_blob``): a
blob already stored under the content's name is checked against the content, on the local
store (read and hashed once) and on S3 (its md5 etag, computed beside the SHA-256)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.config import Config, load_config
from datahub.ingest import import_source
from datahub.storage import StoreRegistry
from datahub.storage.blobs import VERIFIED, blob_key
from tests.writeback.conftest import remove_bucket

CONTENT = b"a labelled frame\n" * 900


@pytest.fixture(params=["local", "moto"])
def objects_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Config]:
    """Blobs on the local store (the default) or in a moto bucket."""
    overrides: dict = {"home": str(tmp_path / "var")}
    if request.param == "moto":
        endpoint = request.getfixturevalue("moto_endpoint")
        bucket = endpoint.new_bucket("copy18")
        overrides.update(endpoint.s3_config_overrides(), objects_url=f"s3://{bucket}/objects")
        request.addfinalizer(lambda: remove_bucket(endpoint, bucket))
    config = load_config(env={}, overrides=overrides)
    config.home_path.mkdir(parents=True, exist_ok=True)
    VERIFIED.clear()
    yield config
    VERIFIED.clear()


def _import(config: Config, tmp_path: Path, planted: bytes) -> tuple[bytes, int, str, str]:
    """Plant ``planted`` under CONTENT's blob name, import a tree holding CONTENT with
    ``--copy``: the bytes its record reads, the bytes copied, the record's etag and the
    planted blob's etag."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.jpg").write_bytes(CONTENT)
    with StoreRegistry(config) as stores:
        objects = stores.store(config.resolved_objects_url)
        planted_etag = objects.put(blob_key(hashlib.sha256(CONTENT).hexdigest()), planted).etag
        catalog = open_catalog(config.resolved_catalog_url)
        try:
            report = import_source(catalog, config, stores, str(src), "frames", copy=True)
            [record] = catalog.list_records("frames", 1)
            store, key = stores.for_url(record.url)
            return store.read(key, etag=record.etag), report.copied_bytes, record.etag, planted_etag
        finally:
            catalog.close()


def test_a_copy_over_a_blob_of_the_right_size_but_other_bytes_records_the_content(
    objects_config: Config, tmp_path: Path
) -> None:
    """Before: the X's were recorded under the content's checksum (one stat, sizes equal)."""
    read, copied, _etag, _planted = _import(objects_config, tmp_path, b"X" * len(CONTENT))
    assert read == CONTENT and copied == len(CONTENT)


def test_a_copy_of_a_stored_content_keeps_its_blob_and_uploads_nothing(
    objects_config: Config, tmp_path: Path
) -> None:
    read, copied, etag, planted = _import(objects_config, tmp_path, CONTENT)
    assert read == CONTENT and copied == 0 and etag == planted
