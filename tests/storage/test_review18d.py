"""review18d: attacks on blobverify18's ``store_blob`` over a real local store (files on disk).

Attacks that held (each test below would fail if it had not):
- a remembered proof is keyed by (url, etag): a blob rewritten in place with the same size
  and its mtime put back is not taken on the old proof (the ctime moves the etag), it is read,
  found wrong and written again with the content;
- the link fallback's clean-up (``local._settled``) drops only a temp name linked to the blob:
  a put still in progress (its own temp inode) and a user's hard link stay.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.storage.base import ObjectInfo
from datahub.storage.blobs import VERIFIED, BlobWriter, Content, blob_key, store_blob
from datahub.storage.local import TEMP_PREFIX, LocalStore

DATA = b"review18d blob\n" * 300


@pytest.fixture(autouse=True)
def _fresh_proofs() -> Iterator[None]:
    VERIFIED.clear()
    yield
    VERIFIED.clear()


def _store(store: LocalStore, data: bytes) -> ObjectInfo:
    digest = hashlib.sha256(data).hexdigest()

    def write(writer: BlobWriter, replace: bool) -> ObjectInfo:
        return (writer.put if replace else writer.put_once)(blob_key(digest), io.BytesIO(data), len(data))

    return store_blob(store, Content(digest, len(data)), write).info


def test_a_blob_rewritten_in_place_after_its_proof_is_not_taken_on_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "objects")
    first = _store(store, DATA)
    assert _store(store, DATA).etag == first.etag  # proven, remembered, kept
    path = tmp_path / "objects" / blob_key(hashlib.sha256(DATA).hexdigest())
    st = os.stat(path)
    with open(path, "r+b") as fh:  # other bytes, same size, mtime put back: only the ctime moves
        fh.write(b"X" * 16)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = _store(store, DATA)
    assert again.etag != first.etag
    assert store.read(blob_key(hashlib.sha256(DATA).hexdigest()), etag=again.etag) == DATA


def test_the_link_clean_up_keeps_a_put_in_progress_and_a_users_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datahub.storage import local

    monkeypatch.setattr(local, "_RENAMEAT2", None)  # the hard-link fallback (NFS, CephFS)
    store = LocalStore(tmp_path / "objects")
    info = _store(store, DATA)
    folder = (tmp_path / "objects" / info.key).parent
    in_progress = folder / f"{TEMP_PREFIX}another-put"
    in_progress.write_bytes(b"half of another blob")
    os.link(folder / info.key.rsplit("/", 1)[1], folder / "users-link")
    linked = store.stat(info.key)  # linked twice: the clean-up looks at the folder's temp names
    assert _store(store, DATA).etag == linked.etag == store.stat(info.key).etag
    assert in_progress.read_bytes() == b"half of another blob"
    assert (folder / "users-link").read_bytes() == DATA
    assert store.read(info.key, etag=linked.etag) == DATA
