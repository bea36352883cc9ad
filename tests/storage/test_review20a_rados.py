"""review20a: a RADOS object with an older put's ``<md5> <size>`` etag record, rewritten by another
tool with bytes of the same size, kept that md5 as its etag (``RadosStore._info`` believed the
xattr while the size matched; a foreign ``write_full`` keeps every xattr). So a conditional
read under the md5 returned the new bytes (a mount's cache keeps pages by etag: wrong bytes
served under a record of other content), and a blob proven once under that etag was kept by
a later commit in the same process (its proof is per etag): the version's record named a blob
holding other bytes, the committed content lost. Now a legacy md5 names the object only once
a whole read of the object's current version hashed to it (once per store and version).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.errors import ObjectChanged
from datahub.storage import open_store
from datahub.storage.blobs import VERIFIED, Content, blob_key, store_blob
from datahub.storage.rados import ETAG_XATTR
from tests.storage.conftest import make_config
from tests.storage.test_blobs18 import Writes
from tests.storage.test_rados import rados_store  # noqa: F401 (the fixture)

pytestmark = pytest.mark.ceph

OLD = b"review20a: bytes an older datahub put\n" * 1000
NEW = bytes(reversed(OLD))  # another tool's rewrite: the same size, other bytes


@pytest.fixture
def legacy(rados_store) -> Iterator[tuple]:  # noqa: F811 (the imported fixture)
    """``test_rados``'s store and plain librados context (the other tool), and a way to make
    an object as an older datahub put it (content, then ``<md5> <size>`` in the xattr)."""
    store, ioctx, prefix = rados_store

    def put_old(key: str, data: bytes) -> str:
        md5 = hashlib.md5(data).hexdigest()
        ioctx.write_full(f"{prefix}/{key}", data)
        ioctx.set_xattr(f"{prefix}/{key}", ETAG_XATTR, f"{md5} {len(data)}".encode())
        return md5

    VERIFIED.clear()
    try:
        yield store, ioctx, prefix, put_old
    finally:
        VERIFIED.clear()


def test_a_same_size_rewrite_by_another_tool_is_not_read_under_the_old_md5(legacy) -> None:
    store, ioctx, prefix, put_old = legacy
    md5 = put_old("k", OLD)
    assert store.stat("k").etag == md5  # untouched: records of it keep reading
    assert store.read("k", etag=md5) == OLD
    ioctx.write_full(f"{prefix}/k", NEW)  # keeps the xattr, and the size
    assert store.stat("k").etag != md5  # before: md5, naming bytes the object no longer holds
    with pytest.raises(ObjectChanged):
        store.read("k", 0, 4096, etag=md5)  # before: NEW[:4096] under OLD's etag
    assert store.read("k", etag=store.stat("k").etag) == NEW


def test_a_fresh_store_checks_the_md5_before_it_names_the_object(legacy, tmp_path: Path) -> None:
    """A process that never saw the object before the rewrite (no memory of its version)."""
    store, ioctx, prefix, put_old = legacy
    md5 = put_old("k", OLD)
    ioctx.write_full(f"{prefix}/k", NEW)
    other = open_store(store.root_url, make_config(tmp_path / "other"))
    try:
        assert [info.etag for info in other.list()] != [md5]
        with pytest.raises(ObjectChanged):
            other.read("k", etag=md5)
    finally:
        other.close()


def test_a_blob_proven_under_its_md5_is_written_again_after_a_same_size_rewrite(legacy) -> None:
    """A commit's pin of a content whose blob another tool rewrote since the last proof in this
    process: the blob must be written again, not kept with other bytes under the version."""
    store, ioctx, prefix, put_old = legacy
    digest = hashlib.sha256(OLD).hexdigest()
    key = blob_key(digest)
    put_old(key, OLD)
    assert store_blob(store, Content(digest, len(OLD)), Writes(OLD)).written == 0  # read, proven, kept
    ioctx.write_full(f"{prefix}/{key}", NEW)  # the blob torn by another tool, same size
    writes = Writes(OLD)
    pinned = store_blob(store, Content(digest, len(OLD)), writes)
    assert writes.calls, "the blob holding other bytes was kept (its md5 etag's old proof taken)"
    assert store.read(key, etag=pinned.info.etag) == OLD


def test_a_listing_reads_no_object_whole_and_its_etag_reads_the_bytes(legacy, monkeypatch) -> None:
    """Sweeps of the shared tier and workspace opens list whole prefixes for sizes: a listing
    gives an unproven older object its version etag (no read), which names the same bytes."""
    store, _ioctx, _prefix, put_old = legacy
    md5 = put_old("k", OLD)
    proofs: list[str] = []
    holds = store._legacy_holds
    monkeypatch.setattr(store, "_legacy_holds", lambda *a: proofs.append(a[2]) or holds(*a))
    (listed,) = store.list()
    assert proofs == [] and listed.etag != md5
    assert store.read("k", etag=listed.etag) == OLD
    assert b"".join(store.read_chunks("k", etag=listed.etag, chunk_size=4096)) == OLD
    assert proofs == []  # the version etag needs no proof
    assert store.stat("k").etag == md5 and proofs == ["k"]  # proven once ...
    assert [info.etag for info in store.list()] == [md5]  # ... and listed so from then on
    assert store.read("k", etag=md5) == OLD and store.read("k", etag=listed.etag) == OLD
    assert proofs == ["k"]
