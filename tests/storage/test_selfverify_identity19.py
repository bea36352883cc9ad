"""The self-verifying blob read's memory is keyed by the store's identity too (guard19's finding,
fixed by the lead): ``selfverify`` remembered "the blob under this etag hashes to its name" per
(URL, etag). A RADOS etag is an object version, which another cluster with a pool of the same
name may hold with other bytes, so a verdict given on one store was taken on another with the
same URL. Shown here on one moto server reached as 127.0.0.1 and as localhost (two endpoints:
two services for all the store knows); the RADOS case is guard19's identity, tested there."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import selfverify
from datahub.errors import ObjectChanged
from datahub.storage import open_store
from datahub.storage.blobs import blob_key
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config

CONTENT = b"selfverify19 " * 500
KEY = blob_key(hashlib.sha256(CONTENT).hexdigest())
MADE_UP = '"' + "0" * 32 + '"'  # an etag the blob never had: a record lost to a replacement


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(selfverify, "MEMORY", selfverify._Memory())
    yield


def test_a_blob_verified_at_one_endpoint_is_hashed_again_at_another(
    moto_endpoint: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[str] = []
    real_hash = selfverify._hashes_to

    def counted(store, key, etag, digest):  # the real hash, counted per store
        hashed.append(store.identity())
        return real_hash(store, key, etag, digest)

    monkeypatch.setattr(selfverify, "_hashes_to", counted)
    bucket = moto_endpoint.new_bucket()
    root = f"s3://{bucket}/objects"
    alias = S3Endpoint(
        "moto", moto_endpoint.url.replace("127.0.0.1", "localhost"), moto_endpoint.access_key,
        moto_endpoint.secret_key,
    )  # fmt: skip
    here = open_store(root, make_config(tmp_path, moto_endpoint))
    elsewhere = open_store(root, make_config(tmp_path, alias))
    try:
        here.put(KEY, CONTENT)
        url = here.url_for(KEY)
        assert elsewhere.url_for(KEY) == url and here.identity() != elsewhere.identity()
        memory = selfverify.MEMORY
        changed = ObjectChanged("refused", url=url)
        now = memory.verified(here, KEY, url, MADE_UP, changed)
        assert here.read(KEY, etag=memory.current(here, url, MADE_UP)) == CONTENT
        assert memory.verified(here, KEY, url, MADE_UP, changed) == now  # remembered here
        assert len(hashed) == 1
        assert memory.current(elsewhere, url, MADE_UP) == MADE_UP  # no answer of another store's
        memory.verified(elsewhere, KEY, url, MADE_UP, changed)
        assert hashed == [here.identity(), elsewhere.identity()]  # before: hashed once, taken there
    finally:
        here.close()
        elsewhere.close()
