"""review17e: blobs17's self-verifying reads (``datahub.cache.selfverify``) attacked for wrong
bytes (promise 2).

A record of a content-addressed blob whose etag is refused is served from the blob's current
etag once its bytes hash to its name. The attacks: the blob replaced again (by other bytes,
then by its own) after a substitution was remembered; a record shorter than the blob under
the same name; a URL that only looks content-addressed, whose bytes at the record's etag were
NOT its name's; many readers of one stale record at once.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.cache import open_cache, selfverify
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef, ObjectStore
from tests.cache.conftest import gated_cache
from tests.cache.test_integrity15 import PAGE, READS, _config
from tests.servers import S3Endpoint

SIZE = 3 * PAGE + 5
STALE = '"0123456789abcdef0123456789abcdef"'  # an etag the blob had once, not now


def _objects(config: Config, root: str) -> Config:
    """``config`` whose objects store is ``root``: only its own blobs verify themselves."""
    return config.model_copy(update={"objects_url": root})


def _root(tmp_path: Path, moto_endpoint: S3Endpoint, url: str, bucket: str) -> str:
    if url == "s3":
        return f"s3://{moto_endpoint.new_bucket(bucket)}/objects"
    return (tmp_path / "objects").as_uri()


@contextmanager
def _blob(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str, reads: str, seed: int
) -> Iterator[tuple[object, ObjectStore, str, bytes]]:
    """A cache read the ``reads`` way, and a blob of SIZE random bytes put under its name in
    an ``url`` store: (cache, store, key, bytes)."""
    root = _root(tmp_path, moto_endpoint, url, f"blob{seed}")
    config = _objects(_config(tmp_path, moto_endpoint, **READS[reads]), root)
    data = random.Random(seed).randbytes(SIZE)
    workers = "fetch_workers" in READS[reads]
    with StoreRegistry(config) as registry, open_cache(config, registry, fetch_workers=workers) as cache:
        store = registry.store(root)
        key = blob_key(hashlib.sha256(data).hexdigest())
        store.put(key, data)
        yield cache, store, key, data


def _read_or_changed(cache, ref: ObjectRef, offset: int = 0, size: int | None = None) -> bytes | None:
    """The bytes a read returned, or None if it raised ObjectChanged (the refusal promise 1 allows)."""
    try:
        return cache.read(ref, offset, size) if size is not None else cache.read(ref, offset)
    except ObjectChanged:
        return None


@pytest.mark.parametrize("reads", ["pages", "stream", "fetch-worker"])
@pytest.mark.parametrize("url", ["s3", "file"])
def test_a_blob_replaced_again_after_a_remembered_substitution_is_checked_again(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str, reads: str
) -> None:
    """The remembered etag is read under If-Match: once the blob holds other bytes, a page not
    yet cached raises ObjectChanged (never the other bytes); once its own bytes are back, it
    reads again. Pages cached meanwhile (a stream reads the record ahead) are the name's
    bytes, checked whole."""
    with _blob(tmp_path, moto_endpoint, url, reads, 171) as (cache, store, key, data):
        old = ObjectRef(store.url_for(key), STALE, SIZE)
        assert cache.read(old, 0, PAGE) == data[:PAGE]  # substituted and remembered
        store.put(key, bytes(SIZE))  # other bytes of the same size
        for offset in (PAGE, 2 * PAGE):
            got = _read_or_changed(cache, old, offset, PAGE)
            # a page the first read streamed or read ahead is cached: the name's bytes
            assert got == (data[offset : offset + PAGE] if reads == "stream" else None)
        assert cache.read(old, 0, PAGE) == data[:PAGE]  # cached: the name's bytes
        store.put(key, data)  # its own bytes again, under yet another etag (file) or the first (s3)
        assert cache.read(old) == data


@pytest.mark.parametrize("reads", list(READS))
@pytest.mark.parametrize("url", ["s3", "file"])
def test_a_record_shorter_than_the_blob_under_its_name_never_reads_whole(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str, reads: str
) -> None:
    """A record of fewer bytes than the verified blob: its last page asks one byte more and
    the blob has it, so the record's end raises ObjectChanged, never a prefix served whole."""
    with _blob(tmp_path, moto_endpoint, url, reads, 172) as (cache, store, key, _):
        for claimed in (SIZE - 1, 2 * PAGE):
            with pytest.raises(ObjectChanged):
                cache.read(ObjectRef(store.url_for(key), STALE, claimed))


@pytest.mark.parametrize("url", ["s3", "file"])
def test_a_key_that_only_looks_content_addressed_never_serves_bytes_its_record_did_not_hold(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str
) -> None:
    """A user's own key ``x/blobs/sha256/ab/cd/<sha256 of C>`` held B when it was recorded
    (its real etag); then C, whose sha256 is the name, is put there. Promise 1: the record
    reads B or raises ObjectChanged. Today a page cached from B and pages fetched from C come
    back as one read: bytes of no version at all. Now only a blob of the objects store itself
    verifies itself (``selfverify.own_blob``): the key sits in the objects store here, outside
    its ``blobs/``."""
    root = _root(tmp_path, moto_endpoint, url, "lookalike")
    config = _objects(_config(tmp_path, moto_endpoint, **READS["pages"]), root)
    held = random.Random(173).randbytes(SIZE)  # what the key held when it was recorded
    named = random.Random(174).randbytes(SIZE)  # the bytes its name is the sha256 of
    with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
        store = registry.store(root)
        key = "x/" + blob_key(hashlib.sha256(named).hexdigest())
        store.put(key, held)
        record = store.ref(key)
        assert cache.read(record, 0, PAGE) == held[:PAGE]
        store.put(key, named)  # the user writes other bytes under the key
        got = _read_or_changed(cache, record)
        assert got in (held, None), "the record served bytes its version never held"


def test_readers_of_one_stale_record_at_once_hash_the_blob_once_and_all_read_its_bytes(
    tmp_path: Path, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads read the four pages of one stale record, two per page; the four page
    fetches are held at the origin's gate until all have arrived, so all four are refused
    at once and verify at once. Every reader gets the name's bytes, and the blob is read
    whole once (the striped lock and the memory), not once per page."""
    root = tmp_path / "origin"
    root.mkdir()
    with StoreRegistry(config) as registry:
        source = registry.store(root.as_uri())
        data = random.Random(175).randbytes(4 * 1024)  # four 1 KiB pages
        key = blob_key(hashlib.sha256(data).hexdigest())
        source.put(key, data)
        cache, gated = gated_cache(tmp_path, source)
        stale = ObjectRef(source.ref(key).url, STALE, len(data))
        hashed: list[str] = []
        real_hash = selfverify._hashes_to

        def counted(*args: object) -> bool | None:  # the real hash, counted
            hashed.append(str(args[2]))
            return real_hash(*args)

        monkeypatch.setattr(selfverify, "_hashes_to", counted)
        results: list[object] = [None] * 8

        def reader(i: int) -> None:
            page = i % 4
            try:
                results[i] = cache.read(stale, page * 1024, 1024) == data[page * 1024 : (page + 1) * 1024]
            except Exception as exc:  # the assertion below names it
                results[i] = exc

        with cache:
            gated.gate.clear()
            threads = [threading.Thread(target=reader, args=(i,)) for i in range(len(results))]
            for t in threads:
                t.start()
            for _ in range(4):  # the four pages' first reads, each refused once the gate opens
                assert gated.arrived.acquire(timeout=30)
            gated.gate.set()
            for t in threads:
                t.join(60)
        assert results == [True] * len(results)
        assert len(hashed) == 1


def test_a_large_blob_is_hashed_in_chunks_never_held_whole(tmp_path: Path, moto_endpoint: S3Endpoint) -> None:
    """A 48 MiB blob under a stale record: the verify reads it as 1 MiB chunks of one
    request, so the process's Python allocations while one page of it is read stay a few
    chunks, never the blob (a FUSE process reading a multi-GB blob would hold it all)."""
    import tracemalloc

    config = _objects(_config(tmp_path, moto_endpoint, **READS["pages"]), (tmp_path / "objects").as_uri())
    piece = random.Random(176).randbytes(1 << 20)
    data = piece * 48
    with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
        store = registry.store((tmp_path / "objects").as_uri())
        key = blob_key(hashlib.sha256(data).hexdigest())
        store.put(key, data)
        stale = ObjectRef(store.url_for(key), STALE, len(data))
        del data
        tracemalloc.start()
        try:
            assert cache.read(stale, 5 << 20, 1024) == piece[:1024]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 8 << 20, f"verifying the blob allocated {peak} bytes at once"


def test_a_blob_replaced_while_it_is_hashed_is_not_remembered_as_bad(
    tmp_path: Path, moto_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the verify's stat and its whole read, the blob is replaced (by other bytes):
    the read under the stat's etag is refused, which says nothing of the bytes that etag
    names. On S3 a single-part put's etag is its bytes' MD5, so the blob's own bytes put
    again come back under that very etag; the record then reads. Before: the interrupted
    hash was remembered as "this etag does not hash to the name", and every later read of
    the record raised ObjectChanged for the life of the process."""
    root = _root(tmp_path, moto_endpoint, "s3", "midhash")
    config = _objects(_config(tmp_path, moto_endpoint, **READS["pages"]), root)
    data = random.Random(177).randbytes(SIZE)
    real_hash = selfverify._hashes_to
    with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
        store = registry.store(root)
        key = blob_key(hashlib.sha256(data).hexdigest())
        first = store.put(key, data).etag

        def replaced_first(*args: object) -> bool | None:  # the real hash, after a put of other bytes
            store.put(key, bytes(SIZE))
            return real_hash(*args)

        monkeypatch.setattr(selfverify, "_hashes_to", replaced_first)
        old = ObjectRef(store.url_for(key), STALE, SIZE)
        with pytest.raises(ObjectChanged):
            cache.read(old, 0, PAGE)
        monkeypatch.setattr(selfverify, "_hashes_to", real_hash)
        assert store.put(key, data).etag == first  # its own bytes: the etag they had
        assert cache.read(old) == data
