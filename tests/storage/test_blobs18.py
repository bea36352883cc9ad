"""blobverify18: ``datahub.storage.blobs.store_blob``, the one way a commit and a ``--copy``
import store a content-addressed blob, over every backend.

A stored blob is trusted only once proven to hold its name's content: by its md5 etag where
the store's etag is one (S3, memory), else by one read hashed and remembered per (url, etag).
Before, one stat (its size) was all: a blob of the right size but other bytes was recorded
and served (review17a).
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.errors import ObjectChanged
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.blobs import VERIFIED, BlobWriter, Content, blob_key, store_blob
from datahub.storage.etags import Md5Etags
from tests.storage.conftest import Backend

MiB = 1 << 20
CONTENT = b"the weights of epoch 12\n" * 400


@pytest.fixture(autouse=True)
def _fresh_proofs() -> Iterator[None]:
    """Each test starts with no remembered proofs (they are per process)."""
    VERIFIED.clear()
    yield
    VERIFIED.clear()


def _content(store: ObjectStore, data: bytes) -> Content:
    """What a writer knows of ``data``: as ``BlobCopier`` computes it."""

    def md5_etags() -> frozenset[str]:
        hasher = store.etag_hasher(len(data))
        if hasher is None:
            return frozenset()
        hasher.update(data)
        return hasher.etags()

    return Content(hashlib.sha256(data).hexdigest(), len(data), md5_etags)


class Writes:
    """The caller's ``write``: puts ``data`` and counts the calls."""

    def __init__(self, data: bytes) -> None:
        self.data, self.calls = data, []

    def __call__(self, writer: BlobWriter, replace: bool) -> ObjectInfo:
        self.calls.append(replace)
        key = blob_key(hashlib.sha256(self.data).hexdigest())
        return (writer.put if replace else writer.put_once)(key, io.BytesIO(self.data), len(self.data))


def _count_reads(monkeypatch: pytest.MonkeyPatch, store: ObjectStore) -> list[str]:
    """The keys read from ``store``: one entry per ``read_chunks`` or outside ``read`` (RADOS
    streams by ``read`` calls of its own, not counted again)."""
    reads: list[str] = []
    inside: list[bool] = []
    chunks, read = store.read_chunks, store.read

    def read_chunks(key, *args, **kwargs):
        reads.append(key)
        inside.append(True)
        try:
            yield from chunks(key, *args, **kwargs)
        finally:
            inside.pop()

    def read_one(key, *args, **kwargs):
        if not inside:
            reads.append(key)
        return read(key, *args, **kwargs)

    monkeypatch.setattr(store, "read_chunks", read_chunks)
    monkeypatch.setattr(store, "read", read_one)
    return reads


def test_a_stored_blob_of_the_right_size_but_other_bytes_is_written_again(backend: Backend) -> None:
    """Before: kept (one stat, its size matched) and its etag returned for the content."""
    store = backend.open()
    key = blob_key(hashlib.sha256(CONTENT).hexdigest())
    store.put(key, b"X" * len(CONTENT))
    writes = Writes(CONTENT)
    stored = store_blob(store, _content(store, CONTENT), writes)
    assert writes.calls == [True] and stored.written == len(CONTENT)
    assert store.read(key, etag=stored.info.etag) == CONTENT


def test_a_stored_blob_that_holds_the_content_is_kept_and_not_written(backend: Backend) -> None:
    """The deduplicated case: the stored object and its etag stay (records of it stay readable)."""
    store = backend.open()
    key = blob_key(hashlib.sha256(CONTENT).hexdigest())
    first = store.put(key, CONTENT)
    writes = Writes(CONTENT)
    stored = store_blob(store, _content(store, CONTENT), writes)
    assert writes.calls == [] and stored.written == 0
    assert stored.info.etag == first.etag == store.stat(key).etag


def test_a_new_blob_is_put_once_and_not_read_back(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nor its md5 computed: a writer's md5 (twice SHA-256's CPU) is for a stored blob only."""
    store = backend.open()
    reads = _count_reads(monkeypatch, store)
    writes = Writes(CONTENT)

    def no_md5() -> frozenset[str]:
        raise AssertionError("md5 of a new blob's bytes computed")

    stored = store_blob(store, Content(hashlib.sha256(CONTENT).hexdigest(), len(CONTENT), no_md5), writes)
    assert writes.calls == [False] and stored.written == len(CONTENT) and reads == []
    assert store.read(blob_key(hashlib.sha256(CONTENT).hexdigest()), etag=stored.info.etag) == CONTENT


def test_put_once_created_tells_a_new_object_from_a_kept_one(backend: Backend) -> None:
    store = backend.open()
    made, created = store.put_once_created("blobs/k", b"first\n" * 100)
    kept, again = store.put_once_created("blobs/k", b"other\n" * 100)
    assert (created, again) == (True, False)
    assert kept.etag == made.etag and store.read("blobs/k", etag=kept.etag) == b"first\n" * 100


def test_the_etag_hasher_predicts_the_etag_a_put_gives(backend: Backend) -> None:
    """Single PUT and multipart alike (S3: threshold 1 MiB, 5 MiB parts); None where the etag
    names the write (local files, RADOS versions)."""
    store = backend.open(multipart_threshold=MiB, multipart_chunk=5 * MiB)
    for data in (CONTENT, os.urandom(6 * MiB + 7)) if backend.is_s3 else (CONTENT,):
        hasher = store.etag_hasher(len(data))
        if backend.name in ("local", "rados"):
            assert hasher is None
            continue
        assert hasher is not None
        for start in range(0, len(data), 3 * MiB + 1):  # pieces that straddle the parts
            hasher.update(data[start : start + 3 * MiB + 1])
        assert store.put(f"e/{len(data)}", data).etag in hasher.etags()
        assert store.stat(f"e/{len(data)}").etag in hasher.etags()


def test_an_md5_etag_proves_a_stored_blob_without_reading_it(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 and memory: the blob's stat alone; local and RADOS: one read, then remembered."""
    store = backend.open()
    key = blob_key(hashlib.sha256(CONTENT).hexdigest())
    store.put(key, CONTENT)
    reads = _count_reads(monkeypatch, store)
    for _ in range(3):
        assert store_blob(store, _content(store, CONTENT), Writes(CONTENT)).written == 0
    assert reads == ([] if store.etag_hasher(len(CONTENT)) is not None else [key])


def test_a_blob_replaced_after_its_proof_is_checked_again(backend: Backend) -> None:
    """The proof is of one etag: other bytes put there since get another, and are found."""
    store = backend.open()
    key = blob_key(hashlib.sha256(CONTENT).hexdigest())
    store.put(key, CONTENT)
    assert store_blob(store, _content(store, CONTENT), Writes(CONTENT)).written == 0
    store.put(key, b"Y" * len(CONTENT))
    writes = Writes(CONTENT)
    stored = store_blob(store, _content(store, CONTENT), writes)
    assert writes.calls == [True] and store.read(key, etag=stored.info.etag) == CONTENT


def test_a_multipart_blob_of_another_part_size_is_read_and_kept(backend: Backend) -> None:
    """An etag the writer did not predict (another client's parts) is no sign of other bytes:
    the blob is read, holds the content, and keeps its etag (a replacement would have made
    every record of it unreadable)."""
    if not backend.is_s3:
        pytest.skip("multipart uploads are S3's")
    data = os.urandom(6 * MiB + 1)
    key = blob_key(hashlib.sha256(data).hexdigest())
    first = backend.open(multipart_threshold=MiB, multipart_chunk=5 * MiB).put(key, data)
    assert first.etag.endswith("-2")
    whole = backend.open(multipart_threshold=64 * MiB, multipart_chunk=8 * MiB)
    writes = Writes(data)
    stored = store_blob(whole, _content(whole, data), writes)
    assert writes.calls == [] and stored.info.etag == first.etag


def test_a_blob_changing_under_every_check_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datahub.storage.local import LocalStore

    store = LocalStore(tmp_path / "objects")
    key = blob_key(hashlib.sha256(CONTENT).hexdigest())
    store.put(key, CONTENT)

    def changed(*_args, **_kwargs):
        raise ObjectChanged("changed meanwhile")

    monkeypatch.setattr(store, "read_chunks", changed)
    with pytest.raises(ObjectChanged, match=hashlib.sha256(CONTENT).hexdigest()):
        store_blob(store, _content(store, CONTENT), Writes(CONTENT))


def test_the_proofs_remembered_are_bounded() -> None:
    from datahub.storage.blobs import _Verified

    proofs = _Verified(3)
    for i in range(5):
        proofs.add((f"u{i}", "e"))
    assert [("u0", "e") in proofs, ("u1", "e") in proofs] == [False, False]
    assert all((f"u{i}", "e") in proofs for i in (2, 3, 4))


def test_md5_etags_of_a_multipart_upload_follow_the_part_boundaries() -> None:
    parts = [b"a" * 5, b"b" * 5, b"c" * 2]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    hasher = Md5Etags(5)
    for piece in (b"aaa", b"aabbbbbc", b"c"):
        hasher.update(piece)
    assert hasher.etags() == {expected}
    exact = Md5Etags(5)
    exact.update(b"a" * 10)
    assert exact.etags() == {hashlib.md5(hashlib.md5(b"a" * 5).digest() * 2).hexdigest() + "-2"}


# --- the local store's link fallback (no renameat2: NFS, CephFS) ----------------------------------
def test_a_stat_between_the_link_fallbacks_link_and_unlink_gets_the_etag_the_blob_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit's stat of a blob whose writer has linked it and not yet dropped its temp name:
    before, the etag of the file linked twice, which the writer's unlink then moved."""
    from datahub.storage import local
    from datahub.storage.local import LocalStore

    monkeypatch.setattr(local, "_RENAMEAT2", None)
    store = LocalStore(tmp_path / "objects")
    between: list[ObjectInfo] = []
    link = os.link

    def link_then_a_stat(src, dst, *args, **kwargs):
        link(src, dst, *args, **kwargs)
        between.append(store.stat("blobs/z"))

    monkeypatch.setattr(local.os, "link", link_then_a_stat)
    kept = store.put_once("blobs/z", b"z" * 5000)
    assert between[0].etag == kept.etag == store.stat("blobs/z").etag
    assert store.read("blobs/z", etag=between[0].etag) == b"z" * 5000
    assert sorted(p.name for p in (tmp_path / "objects" / "blobs").iterdir()) == ["z"]


def test_a_file_linked_twice_by_its_owner_keeps_both_names_and_its_etag(tmp_path: Path) -> None:
    """Only a put's temp name is dropped: a hard link someone made on purpose stays, and the
    file's etag is what it was."""
    from datahub.storage.local import LocalStore

    store = LocalStore(tmp_path / "objects")
    info = store.put("data/a.bin", b"a" * 100)
    os.link(tmp_path / "objects" / "data" / "a.bin", tmp_path / "objects" / "data" / "b.bin")
    after = store.stat("data/a.bin")
    assert after.etag == store.stat("data/b.bin").etag != info.etag  # the link moved the ctime
    assert store.stat("data/a.bin").etag == after.etag
    assert sorted(p.name for p in (tmp_path / "objects" / "data").iterdir()) == ["a.bin", "b.bin"]
