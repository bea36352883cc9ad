"""A record of a content-addressed blob reads although the blob was replaced by its own bytes
(blobs17, from review17a).

The blob's name is the sha256 of its bytes, so a read that meets another etag hashes the blob
once, whole, and serves the record from the new etag if the bytes are those its name says
(``datahub.cache.selfverify``). Before, every read of such a record raised ObjectChanged for
good: a blob put again (the short-blob fix, an RGW multipart race, a put of a commit before
pinblobs16) left every other record of it unreadable, and an unchanged file keeps its record.
A blob of other bytes, or any other URL, still raises ObjectChanged (promise 1)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from tests.cache.conftest import gated_cache
from tests.cache.test_integrity15 import PAGE, READS, _config
from tests.servers import S3Endpoint

SIZE = 3 * PAGE + 5
STALE = '"0123456789abcdef0123456789abcdef"'  # an etag the blob had once, not now


def _reads(cache, ref: ObjectRef) -> list[bytes]:
    """The record read whole, page by page, and its last bytes alone (the ways a reader asks)."""
    return [
        cache.read(ref),
        b"".join(cache.read(ref, i, PAGE) for i in range(0, ref.size, PAGE)),
        cache.read(ref, ref.size - 3, 3),
    ]


@pytest.mark.parametrize("reads", list(READS))
@pytest.mark.parametrize("url", ["s3", "file"])
def test_a_blob_replaced_by_its_own_bytes_serves_records_of_its_old_etag(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str, reads: str
) -> None:
    """Before: ObjectChanged on every read of the record, by every way of reading it."""
    root = (
        f"s3://{moto_endpoint.new_bucket('blobs')}/objects"
        if url == "s3"
        else (tmp_path / "objects").as_uri()
    )
    config = _config(tmp_path, moto_endpoint, **READS[reads]).model_copy(update={"objects_url": root})
    data = random.Random(17).randbytes(SIZE)
    workers = "fetch_workers" in READS[reads]
    with StoreRegistry(config) as registry, open_cache(config, registry, fetch_workers=workers) as cache:
        store = registry.store(root)
        key = blob_key(hashlib.sha256(data).hexdigest())
        store.put(key, data)
        old = ObjectRef(store.url_for(key), STALE, SIZE)
        assert _reads(cache, old) == [data, data, data[-3:]]
        store.put(key, b"x" * SIZE)  # replaced by other bytes of the same size: not its name's
        other = ObjectRef(store.url_for(key), '"fedcba9876543210fedcba9876543210"', SIZE)
        for offset in (0, 2 * PAGE):
            with pytest.raises(ObjectChanged):
                cache.read(other, offset, PAGE)


@pytest.mark.parametrize("url", ["s3", "file"])
def test_only_a_content_addressed_name_verifies_itself(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str
) -> None:
    """An object elsewhere, or under a blob-like name that is not its bytes' sha256, read under
    an etag it does not have: ObjectChanged, as ever."""
    root = (
        f"s3://{moto_endpoint.new_bucket('plain')}/objects"
        if url == "s3"
        else (tmp_path / "objects").as_uri()
    )
    config = _config(tmp_path, moto_endpoint, **READS["pages"]).model_copy(update={"objects_url": root})
    data = random.Random(18).randbytes(SIZE)
    with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
        store = registry.store(root)
        wrong = blob_key(hashlib.sha256(b"other bytes").hexdigest())
        for key in ("data/file.bin", wrong):
            store.put(key, data)
            with pytest.raises(ObjectChanged):
                cache.read(ObjectRef(store.url_for(key), STALE, SIZE))


def test_the_blob_is_hashed_once_and_a_matching_etag_costs_nothing_more(
    tmp_path: Path, config: Config
) -> None:
    """Requests counted at the origin: a record whose etag matches reads its pages and nothing
    else; a stale one pays one refused read and one whole read of the blob, then its pages
    like any record (the answer is remembered, not asked again per page)."""
    root = tmp_path / "origin"
    root.mkdir()
    with StoreRegistry(config) as registry:
        source = registry.store(root.as_uri())
        data = random.Random(19).randbytes(4 * 1024)  # four 1 KiB pages
        key = blob_key(hashlib.sha256(data).hexdigest())
        source.put(key, data)
        cache, gated = gated_cache(tmp_path, source)
        with cache:
            fresh = source.ref(key)
            assert cache.read(fresh) == data and gated.reads == 4  # the four pages, nothing more
            stale = ObjectRef(fresh.url, STALE, fresh.size)
            assert cache.read(stale, 0, 1024) == data[:1024]
            assert gated.reads == 4 + 3  # refused, the whole blob hashed, the page
            assert cache.read(stale, 1024) == data[1024:]
            assert gated.reads == 4 + 3 + 3  # its other pages alone
