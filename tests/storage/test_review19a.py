"""review19a: attacks on blobverify18's ``store_blob`` over a real local store (files on disk).

Found (fixed by blobcas19: the replace is conditional, ``LocalStore.put_replacing``): two writers that both find a wrong
blob (a torn copy of the right size) both replace it, and the first to return keeps an etag
the second's replace takes away: a read of its record under that etag is ObjectChanged for
good (the cache's self-verify, ``datahub/cache/selfverify.py``, still serves it, after a read
and hash of the whole blob once per process; a direct read of the store does not). The second writer's ``put`` checked that the name did not yet hold its bytes
(``local._identical_file``) before its ``fsync``, and the first writer's whole ``store_blob``
ran in that window (forced here, in the real store's own code path).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.storage import local
from datahub.storage.base import ObjectInfo
from datahub.storage.blobs import VERIFIED, BlobWriter, Content, blob_key, store_blob
from datahub.storage.local import LocalStore

DATA = b"review19a blob\n" * 300
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(autouse=True)
def _fresh_proofs() -> Iterator[None]:
    VERIFIED.clear()
    yield
    VERIFIED.clear()


def _store(store: LocalStore) -> ObjectInfo:
    def write(writer: BlobWriter, replace: bool) -> ObjectInfo:
        return (writer.put if replace else writer.put_once)(blob_key(DIGEST), io.BytesIO(DATA), len(DATA))

    return store_blob(store, Content(DIGEST, len(DATA)), write).info


def test_two_writers_replacing_one_wrong_blob_both_keep_a_readable_etag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path / "objects")
    wrong = b"X" * len(DATA)  # a torn or foreign blob of the right size: other bytes
    store.put(blob_key(DIGEST), wrong)
    check = local._identical_file
    first: list[ObjectInfo] = []

    def other_writer_runs_meanwhile(path, fd, size):
        found = check(path, fd, size)
        if not first:  # the second writer's replace, before its fsync and rename: the first runs whole
            first.append(ObjectInfo("", 0, "", 0.0))
            first[0] = _store(store)
        return found

    monkeypatch.setattr(local, "_identical_file", other_writer_runs_meanwhile)
    second = _store(store)
    monkeypatch.setattr(local, "_identical_file", check)
    assert store.read(blob_key(DIGEST), etag=second.etag) == DATA
    assert store.read(blob_key(DIGEST), etag=first[0].etag) == DATA  # ObjectChanged: its etag is gone
